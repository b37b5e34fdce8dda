"""The model you use is the one you think (issue 38, point 1): predict, test, export and
Job.model() say which checkpoint they use (path, step, when written, by which run); a run
that moves an earlier run's checkpoints aside says where and how to pick them; a shorter
run's model beside a longer one moved aside gets a note naming the longer one."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
from conftest import invoke_singa as invoke
from conftest import run_singa

from singa_core import Job
from singa_core.testing import blobs_csv, mlp_job, run_job


@pytest.fixture(scope="module")
def rerun(tmp_path_factory):
    """A 30-step run, then a 10-step run of the same job in the same workspace."""
    folder = tmp_path_factory.mktemp("rerun")
    data = blobs_csv(folder / "blobs.csv", n=100)
    conf = mlp_job(data, steps=30).replace("disp_freq: 10", "disp_freq: 10\ncheckpoint_freq: 10")
    first = run_job(conf, folder)
    second = run_job(conf, folder, "-o", "train_steps=10")
    (aside,) = (folder / "workspace").glob("checkpoint.before-*")
    return folder, first, second, aside


def test_the_run_that_moves_checkpoints_aside_says_where_and_how_to_pick_them(rerun):
    folder, first, second, aside = rerun
    err = second.stderr if hasattr(second, "stderr") else second.output
    assert f"moved them to {aside}" in err
    assert f"`--checkpoint {aside / 'step30-worker0'}` picks that model" in err
    assert "moved them" not in (first.stderr if hasattr(first, "stderr") else first.output)


def test_job_model_has_the_checkpoint_as_an_attribute(rerun):
    folder, _, _, aside = rerun
    job = Job.from_file(folder / "job.conf", workspace=folder / "workspace")
    t0 = time.time()
    model = job.model()
    info = model.checkpoint
    assert info.path == folder / "workspace" / "checkpoint" / "step10-worker0"
    assert info.step == 10 and info.verified
    assert t0 - 600 < info.written <= t0
    # the run: what its workspace lock recorded (in this process: the test's command line)
    assert info.run["pid"] == os.getpid() and info.run["command"].startswith("singa")
    assert isinstance(info.run["started"], float) and info.run["started"] <= info.written
    assert str(info).startswith(f"{info.path} (step 10, written ")
    (note,) = model.checkpoint_notes
    assert f"{aside} holds step 30 of an earlier, longer run" in note
    assert f"--checkpoint {aside / 'step30-worker0'}" in note
    # the longer run's model, picked: its own step and no note
    longer = job.model(aside / "step30-worker0")
    assert longer.checkpoint.step == 30 and longer.checkpoint_notes == []
    assert longer.checkpoint.written < info.written


def _lines(text: str, start: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.startswith(start)]


def test_predict_test_and_export_say_which_checkpoint_and_name_the_longer_run(rerun, tmp_path):
    folder, _, _, aside = rerun
    conf, ws = folder / "job.conf", folder / "workspace"
    np.save(tmp_path / "x.npy", np.zeros((2, 4), np.float32))
    newest = ws / "checkpoint" / "step10-worker0"
    runs = {
        "predict": ["predict", conf, "--workspace", ws, tmp_path / "x.npy"],
        "test": ["test", conf, "-o", f"cluster.workspace={ws}", "--steps", "1"],
        "export": ["export", conf, "--workspace", ws, "--out", tmp_path / "m.safetensors"],
    }
    for name, args in runs.items():
        res = invoke(*args)
        assert res.exit_code == 0, (name, res.output)
        (line,) = _lines(res.output, "checkpoint: ")
        assert line.startswith(f"checkpoint: {newest} (step 10, written "), (name, line)
        assert "by the run started" in line and f"(pid {os.getpid()}, `singa" in line, line
        (note,) = _lines(res.output, "note: this is step 10")
        assert f"{aside} holds step 30" in note, (name, note)
        # with --checkpoint: the one given, and no note
        res = invoke(*args, "--checkpoint", aside / "step30-worker0")
        assert res.exit_code == 0, (name, res.output)
        (line,) = _lines(res.output, "checkpoint: ")
        assert line.startswith(f"checkpoint: {aside / 'step30-worker0'} (step 30, "), line
        assert not _lines(res.output, "note: this is step")


@pytest.mark.slow
def test_submit_says_it_moves_the_earlier_checkpoints_aside(rerun, tmp_path):
    folder, _, _, _ = rerun
    env = {"SINGA_JOBS_DIR": str(tmp_path / "jobs")}
    ws = folder / "workspace"
    res = run_singa("submit", str(folder / "job.conf"), "--workspace", str(ws), env=env)
    assert res.returncode == 0, res.stderr
    job_id = res.stdout.strip()
    (note,) = _lines(res.stderr, "note: ")
    assert f"{ws.resolve() / 'checkpoint'} holds an earlier run's checkpoints (up to step 10)" in (
        note
    )
    assert "checkpoint.before-<YYYYmmdd-HHMMSS>/step10-worker0` picks that model" in note
    assert f"singa logs {job_id}" in note
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        log = run_singa("logs", job_id, env=env).stdout
        if "moved them to" in log and run_singa("jobs", env=env).stdout.count("finished"):
            break
        time.sleep(0.5)
    assert "moved them to" in log and "step10-worker0` picks that model" in log, log
    # a resumed submit moves nothing and says nothing
    res = run_singa("submit", str(folder / "job.conf"), "--workspace", str(ws), "--resume",
                    env=env)  # fmt: skip
    assert res.returncode == 0 and not _lines(res.stderr, "note: "), res.stderr
