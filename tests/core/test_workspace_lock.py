"""One run per workspace (issue 21): the lock, its holder's record, no checkpoint mix."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import REPO
from typer.testing import CliRunner

from singa_core.commands.cli import app
from singa_core.running import checkpoint as ck
from singa_core.running.workspace import INFO_NAME, WorkspaceLock

runner = CliRunner()


def test_lock_refuses_a_second_holder_and_names_the_first(tmp_path):
    ws = tmp_path / "ws"
    first = WorkspaceLock(ws).acquire("singa train job.conf")
    try:
        info = json.loads((ws / INFO_NAME).read_text())
        assert info["pid"] == os.getpid() and info["command"] == "singa train job.conf"
        # flock locks belong to the open file: a second open in this process is refused too
        try:
            WorkspaceLock(ws).acquire()
        except Exception as exc:  # noqa: BLE001
            text = exc.format()
        else:
            raise AssertionError("a second lock on a held workspace succeeded")
        assert f"in use by another run: pid {os.getpid()} on host" in text
        assert "help:" in text and "--workspace" in text
    finally:
        first.release()
    assert not (ws / INFO_NAME).exists()
    WorkspaceLock(ws).acquire().release()  # free again


def test_a_dead_holder_does_not_block(tmp_path):
    ws = tmp_path / "ws"
    code = (
        "import os,sys; from singa_core.running.workspace import WorkspaceLock;"
        f"WorkspaceLock({str(ws)!r}).acquire('x'); os.kill(os.getpid(), 9)"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO)
    assert proc.returncode == -9
    assert (ws / INFO_NAME).exists()  # its record stays, its lock went with it
    WorkspaceLock(ws).acquire().release()


def _finished_files(folder) -> set[str]:
    """The files in ``folder`` that are written: not the hidden temporary of a write still in
    progress (``.step15-worker0.state.npz.<random>.tmp``, renamed when done)."""
    return {p.name for p in folder.iterdir() if not p.name.startswith(".")}


@pytest.mark.slow
def test_second_train_on_a_workspace_exits_2_naming_the_first(small_job):
    conf, ws = small_job(steps=10**6, hidden=64, checkpoint_freq=5)
    cmd = [sys.executable, "-m", "singa_core.commands.cli", "train", str(conf), "--seed", "3"]
    first = subprocess.Popen(
        cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        while not first.stdout.readline().startswith("Train step-10"):
            assert first.poll() is None, first.stderr.read()
        before = _finished_files(ws / "checkpoint")
        second = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=60)
        assert second.returncode == 2, second.stderr
        assert f"in use by another run: pid {first.pid} on host" in second.stderr
        assert "Traceback" not in second.stderr
        # the refusal comes before the job is built: no start line, no step, no BLAS trial
        # (checked by what it printed, not by its time: that depends on the machine's load)
        assert "starting | seed" not in second.stderr, second.stderr
        assert "BLAS threads" not in second.stderr, second.stderr
        assert second.stdout == "", second.stdout
        assert first.poll() is None  # untouched: still training, its files still there
        assert before <= _finished_files(ws / "checkpoint")
        first.terminate()
        _, err = first.communicate(timeout=60)
        assert first.returncode == 143, err
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    step, _ = ck.latest_checkpoint(ws)
    assert step > 10


def test_stale_temp_files_of_a_live_run_are_left_alone(small_job):
    conf, ws = small_job(steps=5)
    (ws / "checkpoint").mkdir(parents=True)
    tmp = ws / "checkpoint" / ".step5-worker0.abcd1234.tmp"
    tmp.write_bytes(b"half")
    lock = WorkspaceLock(ws).acquire("live run")
    try:
        res = runner.invoke(app, ["train", str(conf)])
        assert res.exit_code == 2 and "in use by another run" in res.output
        assert tmp.exists()  # the refused run cleaned up nothing
    finally:
        lock.release()
    res = runner.invoke(app, ["train", str(conf)])
    assert res.exit_code == 0, res.output
    assert not tmp.exists() and "removed 1 temporary file" in res.output


def test_resume_continues_only_the_run_it_names(small_job):
    conf, ws = small_job(steps=20, checkpoint_freq=5)
    assert runner.invoke(app, ["train", str(conf), "--seed", "1"]).exit_code == 0
    # a new, shorter run: the longer run's later steps must not stay beside its own
    res = runner.invoke(app, ["train", str(conf), "--seed", "2", "-o", "train_steps=10"])
    assert res.exit_code == 0, res.output
    assert sorted(ck.checkpoint_steps(ws)) == [0, 5, 10]
    (aside,) = ws.glob("checkpoint.before-*")
    assert (aside / "step20-worker0").is_file()
    res = runner.invoke(app, ["train", str(conf), "--resume", "-o", "train_steps=15"])
    assert res.exit_code == 0, res.output
    assert "resuming at step 10" in res.output and "seed 2" in res.output


def test_checkpoint_path_inside_the_moved_folder_still_loads(small_job, tmp_path):
    conf, ws = small_job(steps=5)
    assert runner.invoke(app, ["train", str(conf), "--seed", "1"]).exit_code == 0
    src = ws / "checkpoint" / "step5-worker0"
    res = runner.invoke(app, ["train", str(conf), "-o", f'checkpoint_path="{src}"'])
    assert res.exit_code == 0, res.output
    assert "moved them to" in res.output
