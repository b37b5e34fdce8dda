"""Studies on real MNIST (a small MLP, a few steps per trial) through the `singa` command:
trials in parallel, the study in its store, --show, best.conf trained again to the trial's
result, the same seed proposing the same points, a failing trial, and a tuner killed with
kill -9 then resumed without redoing a finished trial."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from tune_jobs import SPACE, mnist_job, space_file

from tests.conftest import REPO, run_singa, track

pytest.importorskip("optuna")
pytestmark = pytest.mark.slow


def _show(study) -> dict:
    res = run_singa("tune", "--show", str(study), "--json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def _ok(res) -> None:
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Traceback" not in res.stderr, res.stderr


def _final_test(ws) -> dict:
    recs = [json.loads(line) for line in (ws / "metrics.jsonl").read_text().splitlines()]
    return [r for r in recs if r.get("phase") == "test"][-1]


def test_a_study_then_show_then_best_conf_trains_to_the_trials_result(tmp_path, mnist_stores):
    conf = mnist_job(tmp_path, mnist_stores, steps=60, test_freq=30)
    study = tmp_path / "study"
    res = run_singa("tune", str(conf), str(space_file(tmp_path)), "--study", str(study),
                    "--parallel", "2", "--seed", "3", "--keep", "1")  # fmt: skip
    _ok(res)
    assert "2 at a time on this machine, 1 BLAS thread(s) each" in res.stderr
    assert "best trials:" in res.stderr and "wrote " in res.stderr
    doc = _show(study)
    assert doc["objective"] == {"metric": "accuracy", "phase": "test", "at": "last",
                                "direction": "maximize"}  # fmt: skip
    trials = doc["trials"]
    assert [t["number"] for t in trials] == [0, 1, 2, 3]
    assert {t["state"] for t in trials} <= {"complete", "pruned"}
    for t in trials:
        assert set(t["params"]) == {
            "updater.learning_rate.base_lr", "updater.momentum",
            "neuralnet.layer[2].innerproduct_conf.num_output",
        }  # fmt: skip
        lr = float(t["params"]["updater.learning_rate.base_lr"])
        assert 0.001 <= lr <= 0.3
        assert 16 <= int(t["params"]["neuralnet.layer[2].innerproduct_conf.num_output"]) <= 64
        assert t["curve"] and t["curve"][0][0] == 0  # each test pass's objective
        ws = study / "trials" / f"{t['number']:04d}"
        assert (ws / "metrics.jsonl").is_file() and (ws / "trial.log").is_file()
    done = [t for t in trials if t["state"] == "complete"]
    best = max(done, key=lambda t: t["value"])
    assert doc["best"] == best["number"]
    assert best["value"] > 0.3  # 60 steps of SGD learn something
    # the best trial keeps its checkpoint (--keep 1), the others' are pruned
    for t in trials:
        kept = (study / "trials" / f"{t['number']:04d}" / "checkpoint").is_dir()
        assert kept == (t["number"] == best["number"]), t
    # best.conf: a complete job.conf; trained with the trial's seed and threads it gives
    # the trial's result
    best_conf = study / "best.conf"
    text = best_conf.read_text()
    assert f"trial {best['number']}" in text and "neuralnet {" in text
    threads = {"OPENBLAS_NUM_THREADS": str(best["threads"])}
    res = run_singa("train", str(best_conf), "--seed", str(best["seed"]), "-q",
                    "--no-tensorboard", env=threads)  # fmt: skip
    _ok(res)
    again = _final_test(study / "best")
    assert again["step"] == 60
    assert again["accuracy"] == pytest.approx(best["value"], abs=1e-12)
    # the text view
    res = run_singa("tune", "--show", str(study))
    _ok(res)
    assert res.stdout.splitlines()[1].split()[:4] == ["trial", "base_lr", "momentum", "num_output"]
    assert f"best: trial {best['number']}" in res.stdout


def test_the_same_seed_proposes_the_same_points(tmp_path, mnist_stores):
    conf = mnist_job(tmp_path, mnist_stores, steps=30, test_freq=30)
    text = SPACE.replace("budget { trials: 4 }", "budget { trials: 3 }\nsampler { kind: RANDOM }"
                         "\nearly_stopping { rule: NONE }")  # fmt: skip
    space = space_file(tmp_path, text)
    points = {}
    for name, seed in (("a", "7"), ("b", "7"), ("c", "8")):
        res = run_singa("tune", str(conf), str(space), "--study", str(tmp_path / name),
                        "--seed", seed, "--parallel", "2")  # fmt: skip
        _ok(res)
        points[name] = [t["params"] for t in _show(tmp_path / name)["trials"]]
    assert points["a"] == points["b"]
    assert points["a"] != points["c"]


def test_a_failing_trial_ends_with_its_reason_not_the_study(tmp_path, mnist_stores):
    conf = mnist_job(tmp_path, mnist_stores, steps=30, test_freq=30)
    space = space_file(
        tmp_path,
        """\
param { field: "updater.learning_rate.base_lr" choice { value: "0.05" value: "1e30" } }
budget { trials: 4 }
sampler { kind: RANDOM }
early_stopping { rule: NONE }
""",
    )
    study = tmp_path / "study"
    res = run_singa("tune", str(conf), str(space), "--study", str(study), "--seed", "1",
                    "--parallel", "2", "-o", "neuralnet.layer[3].type=kReLU")  # fmt: skip
    _ok(res)
    trials = _show(study)["trials"]
    assert len(trials) == 4
    failed = [t for t in trials if t["state"] == "failed"]
    assert failed and all(t["params"]["updater.learning_rate.base_lr"] == "1e30" for t in failed)
    assert all("error:" in t["reason"] and "non-finite" in t["reason"] for t in failed), failed
    assert any(t["state"] == "complete" for t in trials)


def _tuner(*args) -> subprocess.Popen:
    return track(subprocess.Popen(
        [sys.executable, "-m", "singa_core.commands.cli", "tune", *args], cwd=REPO,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    ))  # fmt: skip


def _wait_for(check, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _test_steps(ws) -> list[int]:
    try:
        lines = (ws / "metrics.jsonl").read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("phase") == "test":
            out.append(rec["step"])
    return out


def _free(ws) -> bool:
    from singa_core.running.workspace import WorkspaceLock

    try:
        WorkspaceLock(ws).acquire("test").release()
        return True
    except Exception:  # noqa: BLE001 - still held by a stopping trial
        return False


def test_kill_9_of_the_tuner_loses_no_finished_trial_and_resume_continues(tmp_path, mnist_stores):
    conf = mnist_job(tmp_path, mnist_stores, steps=1500, test_freq=100)
    text = SPACE.replace("budget { trials: 4 }", "budget { trials: 3 }\nearly_stopping "
                         "{ rule: NONE }")  # fmt: skip
    space = space_file(tmp_path, text)
    study = tmp_path / "study"
    proc = _tuner(str(conf), str(space), "--study", str(study), "--parallel", "1", "--seed", "4")
    second = tmp_path / "trials" / "x"
    try:
        second = study / "trials" / "0001"
        _wait_for(lambda: any(s >= 200 for s in _test_steps(second)), 240, "trial 1's passes")
        # a second tuner on the same study is refused, naming the first
        res = run_singa("tune", "--resume", "--study", str(study))
        assert res.returncode == 2, res.stderr
        assert f"the study {study} is in use by another tuner: pid {proc.pid}" in res.stderr
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # the trial got SIGTERM from the kernel: it checkpoints, exits and frees its workspace
    _wait_for(lambda: _free(second), 60, "trial 1 to stop")
    before = {t["number"]: t for t in _show(study)["trials"]}
    assert before[0]["state"] == "complete" and before[0]["step"] == 1500
    assert before[1]["state"] == "interrupted"
    assert (second / "checkpoint").is_dir()
    res = run_singa("tune", "--resume", "--study", str(study))
    _ok(res)
    after = {t["number"]: t for t in _show(study)["trials"]}
    assert sorted(after) == [0, 1, 2]
    assert after[0] == before[0]  # not redone
    assert after[1]["state"] == "complete" and after[1]["step"] == 1500
    log = (second / "trial.log").read_text()
    assert "--resume" in log and "resuming at step" in log  # from its checkpoint
    assert [s for s in _test_steps(second)] == list(range(0, 1501, 100))  # no pass twice
    assert after[2]["state"] == "complete"


def test_ctrl_c_stops_every_trial_with_a_checkpoint(tmp_path, mnist_stores):
    conf = mnist_job(tmp_path, mnist_stores, steps=3000, test_freq=100)
    text = SPACE.replace("budget { trials: 4 }", "budget { trials: 2 }")
    study = tmp_path / "study"
    proc = _tuner(str(conf), str(space_file(tmp_path, text)), "--study", str(study),
                  "--parallel", "2")  # fmt: skip
    try:
        for n in (0, 1):
            ws = study / "trials" / f"{n:04d}"
            _wait_for(lambda ws=ws: any(s >= 100 for s in _test_steps(ws)), 240, f"trial {n}")
        proc.send_signal(signal.SIGINT)  # to the tuner alone, as a terminal's Ctrl-C is not
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert "SIGINT: stopping every trial with a checkpoint" in err
    assert f"continue with: singa tune --resume --study {study}" in err
    for t in _show(study)["trials"]:
        assert t["state"] == "interrupted", t
        ws = study / "trials" / f"{t['number']:04d}"
        assert (ws / "checkpoint").is_dir() and _free(ws)
        assert "interrupted at step" in (ws / "trial.log").read_text()


class _LostWithItsNode:
    """A trial whose node goes away (a cluster's actor lost): at the tuner's first look the
    process is killed -9 and the handle says ``lost``, as RayTrialHandle does."""

    node = "node-b"

    def __init__(self, proc) -> None:
        self.proc, self.lost = proc, False

    def poll(self):
        if not self.lost:  # the node goes at the tuner's first look (no race with the trial)
            self.proc.kill()
            self.proc.wait(10)
            self.lost = True
        return -1

    def records(self):
        return [] if self.lost else self.proc.records()

    def stop(self):
        if not self.lost:
            self.proc.stop()

    def reason(self, code):
        return (
            f"lost on the Ray cluster (node {self.node})" if self.lost else self.proc.reason(code)
        )

    def close(self):
        pass


def test_a_trial_lost_with_its_node_runs_again_from_step_0(tmp_path, mnist_stores):
    from singa_core.tuning import create_study, open_study
    from singa_core.tuning.launch import LocalTrials

    class LosingTrials(LocalTrials):
        lost_one = False

        def start(self, launch):
            proc = super().start(launch)
            if self.lost_one:
                return proc
            LosingTrials.lost_one = True
            return _LostWithItsNode(proc)

    conf = mnist_job(tmp_path, mnist_stores, steps=60, test_freq=30)
    space = space_file(
        tmp_path, SPACE.replace("trials: 4", "trials: 3") + "sampler { kind: RANDOM }\n"
    )
    study = create_study(conf, space, tmp_path / "study", seed=3, err=io.StringIO())
    study.run(parallel=1, runner=LosingTrials(1), live=False)
    records = {r.number: r for r in open_study(tmp_path / "study").trials()}
    assert len(records) == 4, records  # the budget of 3, and the lost one's rerun
    lost = records[0]
    assert lost.state == "failed" and "node-b" in lost.reason and "run again" in lost.reason
    rerun = [r for r in records.values() if r.number and r.params == lost.params]
    assert len(rerun) == 1 and rerun[0].state == "complete" and rerun[0].step == 60
    assert sum(r.state == "complete" for r in records.values()) == 3
