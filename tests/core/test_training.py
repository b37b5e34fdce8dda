"""The training loop: SINGA's firing rules, checkpoints, exact resume, fine-tuning."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import REPO
from typer.testing import CliRunner

from singa_core.commands.cli import app
from singa_core.running import checkpoint as ck
from singa_core.running.training import fires

runner = CliRunner()


def singa(*args):
    res = runner.invoke(app, [str(a) for a in args])
    if res.exit_code != 0:
        raise AssertionError(f"exit {res.exit_code}\n{res.output}\n{res.exception!r}")
    return res


def params_of(path):
    return {r.name: r for r in ck.read_params(path)}


def test_fires_matches_singa():
    assert fires(0, 10, 0) and fires(10, 10, 0) and not fires(5, 10, 0)
    assert not fires(0, 0, 0)
    assert not fires(50, 60, 100) and fires(100, 60, 100) and fires(160, 60, 100)


def test_small_job_trains_and_reports(small_job):
    conf, ws = small_job(steps=60, checkpoint_freq=20)
    out = singa("train", conf, "--seed", "1").output
    assert "Test step-0, " in out and "Train step-0, " in out and "Train step-50, " in out
    assert "Test step-30, " in out
    names = sorted(p.name for p in (ws / "checkpoint").iterdir() if "." not in p.name)
    assert names == ["step0-worker0", "step20-worker0", "step40-worker0", "step60-worker0"]
    lines = [json.loads(x) for x in (ws / "metrics.jsonl").read_text().splitlines()]
    assert lines[0]["event"] == "start" and lines[0]["seed"] == 1 and not lines[0]["resumed"]
    tests = [x for x in lines if x.get("phase") == "test"]
    assert tests[-1]["accuracy"] > 0.9  # blobs are separable
    assert {"loss", "accuracy", "lr"} <= set(next(x for x in lines if x.get("phase") == "train"))
    # versions count updates: step<S> holds exactly S updates
    assert params_of(ws / "checkpoint" / "step20-worker0")["0#w1"].version == 20
    assert params_of(ws / "checkpoint" / "step60-worker0")["0#b2"].version == 60


def test_same_seed_is_repeatable(small_job, tmp_path):
    conf, ws = small_job(steps=30, dropout=True)
    singa("train", conf, "--seed", "5")
    a = params_of(ws / "checkpoint" / "step30-worker0")
    singa("train", conf, "--seed", "5", "--workspace", tmp_path / "ws2")
    b = params_of(tmp_path / "ws2" / "checkpoint" / "step30-worker0")
    for name in a:
        np.testing.assert_array_equal(a[name].value, b[name].value)


def test_resume_gives_the_uninterrupted_parameters(small_job, tmp_path):
    # momentum history, dropout masks, the data cursor and random_skip must all carry over
    conf, ws = small_job(steps=60, dropout=True, momentum=0.9, checkpoint_freq=25)
    singa("train", conf, "--seed", "9")
    full = params_of(ws / "checkpoint" / "step60-worker0")

    ws2 = tmp_path / "resumed"
    singa("train", conf, "--seed", "9", "--workspace", ws2, "-o", "train_steps=37")
    out = singa("train", conf, "--resume", "--workspace", ws2).output
    assert "resuming at step 37 | seed 9 |" in out  # the seed comes from the checkpoint
    resumed = params_of(ws2 / "checkpoint" / "step60-worker0")
    for name, rec in full.items():
        np.testing.assert_array_equal(rec.value, resumed[name].value, err_msg=name)
        assert rec.version == resumed[name].version


def test_resume_without_checkpoint_is_a_user_error(small_job):
    conf, _ = small_job(steps=5)
    res = runner.invoke(app, ["train", str(conf), "--resume"])
    assert res.exit_code == 2 and "no checkpoint" in res.output


def test_checkpoint_path_fine_tuning_keeps_values(small_job, tmp_path):
    conf, ws = small_job(steps=20)
    singa("train", conf, "--seed", "2")
    src = ws / "checkpoint" / "step20-worker0"
    ws2 = tmp_path / "ft"
    singa(
        "train",
        conf,
        "--workspace",
        ws2,
        "-o",
        f"checkpoint_path={src}",
        "-o",
        "updater.learning_rate.base_lr=0",
        "-o",
        "updater.weight_decay=0",
        "-o",
        "updater.momentum=0",
        "-o",
        "train_steps=3",
        "-o",
        "test_steps=0",
        "-o",
        "checkpoint_freq=100",
    )
    before, after = params_of(src), params_of(ws2 / "checkpoint" / "step0-worker0")
    for name, rec in before.items():
        np.testing.assert_array_equal(rec.value, after[name].value)
        assert after[name].version == 0  # reset_param_version: versions restart at step 0
    final = params_of(ws2 / "checkpoint" / "step3-worker0")
    np.testing.assert_array_equal(final["0#w1"].value, before["0#w1"].value)  # lr 0


def train_until_step_10(conf) -> subprocess.Popen:
    """Start `singa train` in a subprocess and return once step 10 has been displayed."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "singa_core.commands.cli", "train", str(conf), "--seed", "4"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    while True:
        line = proc.stdout.readline()
        if line.startswith("Train step-10") or not line:
            return proc


def test_ctrl_c_checkpoints_then_resume_matches(small_job, tmp_path):
    conf, ws = small_job(steps=10**6, hidden=256, checkpoint_freq=0)
    proc = train_until_step_10(conf)
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "continue with --resume" in err and "Traceback" not in err
    step, _ = ck.latest_checkpoint(ws)
    assert 10 < step < 10**6
    end = step + 40
    singa("train", conf, "--resume", "-o", f"train_steps={end}")
    resumed = params_of(ws / "checkpoint" / f"step{end}-worker0")
    singa(
        "train", conf, "--seed", "4", "--workspace", tmp_path / "full", "-o", f"train_steps={end}"
    )
    full = params_of(tmp_path / "full" / "checkpoint" / f"step{end}-worker0")
    for name, rec in full.items():
        np.testing.assert_array_equal(rec.value, resumed[name].value, err_msg=name)


@pytest.mark.parametrize("flag", ["--dry-run"])
def test_dry_run_prints_net(small_job, flag):
    conf, ws = small_job()
    out = singa("train", conf, flag).output
    assert "kTrain net (5 layers):" in out
    assert "ip1" in out and "kInnerProduct" in out and "out 20x16" in out and "params 80" in out
    assert "total: 131 parameter values in 4 params" in out
    assert "engine: inprocess" in out
    assert not (ws / "checkpoint").exists()


def test_sigterm_checkpoints_and_exits_143(small_job):
    conf, ws = small_job(steps=10**6, hidden=64)
    proc = train_until_step_10(conf)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    step, _ = ck.latest_checkpoint(ws)
    assert step > 10


# a SIGTERM delivered the moment the run's start record is written: the first moment a
# console (`singa jobs`) can see the job started and stop it
SIGTERM_AT_START = """
import os, signal, sys
from singa_core.running.reporting import Reporter

append = Reporter._append

def append_then_sigterm(self, rec):
    append(self, rec)
    if rec.get("event") == "start":
        os.kill(os.getpid(), signal.SIGTERM)

Reporter._append = append_then_sigterm
from singa_core.commands.cli import main
sys.argv[0] = "singa"
main()
"""


def test_sigterm_as_the_start_record_appears_checkpoints_and_exits_143(small_job):
    """The stop handlers are in place before the start record (a regression: they were
    installed just after it, and a stop sent by a console in between killed the run
    without its checkpoint or its last line)."""
    conf, ws = small_job(steps=10**6, hidden=16)
    res = subprocess.run(
        [sys.executable, "-c", SIGTERM_AT_START, "train", str(conf)],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.returncode == 143, res.stderr
    step, _ = ck.latest_checkpoint(ws)
    assert step in (0, 1)  # stopped in step 0's test pass, or after step 0's training
    assert f"interrupted at step {step} " in res.stderr and "Traceback" not in res.stderr


def test_new_run_over_old_checkpoints_moves_them_aside(small_job):
    conf, ws = small_job(steps=5)
    singa("train", conf)
    out = singa("train", conf).output
    assert "had an earlier run's checkpoints (up to step 5); moved them to" in out
    (aside,) = ws.glob("checkpoint.before-*")
    assert (aside / "step5-worker0").is_file()


def test_output_layers_publish_their_files_after_each_evaluation(small_job, tmp_path):
    out = tmp_path / "scores.csv"
    extra = (
        f'layer {{ name: "out" type: kCSVOutput srclayers: "ip2" include: kTest '
        f'store_conf {{ path: "{out}" }} }}'
    )
    conf, ws = small_job(steps=40, extra=extra)  # tests at steps 0, 30 and 40 (5 batches of 20)
    res = CliRunner().invoke(app, ["train", str(conf), "--seed", "1", "-q"])
    assert res.exit_code == 0, res.output
    # published by Layer.close after each test pass, not by garbage collection
    lines = out.read_text().splitlines()
    assert len(lines) == 3 * 5 * 20
    assert all(len(line.split(",")) == 3 for line in lines)  # ip2 has no labels to prefix
