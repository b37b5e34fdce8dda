"""A named pipe where singa expects a file never blocks it (issue 46, point 1): a FIFO in
place of a checkpoint, its training state or its manifest, of metrics.jsonl, of the
workspace lock or its record, or of a job record is refused at once with the message an
explicit path gets ("is a named pipe, not a file"), located at the file. Every command runs
in-process under an alarm, so a regression fails here (naming the command) instead of
hanging the suite."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal

import numpy as np
import pytest
from conftest import invoke_singa

from singa_core.testing import blobs_csv, mlp_job, run_job

SECONDS = 30  # far more than any of these commands needs; a FIFO open waits forever


class Blocked(Exception):
    pass


@contextlib.contextmanager
def alarm(what: str):
    def on_alarm(signum, frame):
        raise Blocked(f"`singa {what}` was still running after {SECONDS} s: it blocks")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(SECONDS)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def singa(*args):
    with alarm(" ".join(str(a) for a in args)):
        res = invoke_singa(*args)
    if isinstance(res.exception, Blocked):
        raise AssertionError(str(res.exception))
    return res


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A 40-step run with checkpoints at steps 0, 20 and 40 (kept aside, copied per test)."""
    folder = tmp_path_factory.mktemp("fifo")
    data = blobs_csv(folder / "blobs.csv", n=100)
    conf = mlp_job(data, steps=40).replace("disp_freq: 10", "disp_freq: 10\ncheckpoint_freq: 20")
    run_job(conf, folder)
    np.save(folder / "x.npy", np.zeros((2, 4), np.float32))
    return folder


@pytest.fixture
def job(trained, tmp_path):
    folder = tmp_path / "job"
    shutil.copytree(trained, folder)
    return folder / "job.conf", folder / "workspace", folder / "x.npy"


def plant_fifo(path) -> None:
    os.unlink(path) if os.path.lexists(path) else None
    os.mkfifo(path)


def refused(res, path, what: str) -> None:
    """Exit 2, the first line ``PATH: error: ...WHAT PATH is a named pipe, not a file``, a
    help line, no traceback."""
    assert res.exit_code == 2, res.output
    errors = [ln for ln in res.output.splitlines() if ": error: " in ln]
    assert errors, res.output
    assert errors[0].startswith(f"{path}: error: "), res.output
    assert f"{what} {path} is a named pipe, not a file" in errors[0], res.output
    assert "\nhelp: " in res.output and "Traceback" not in res.output


COMMANDS = {
    "predict --workspace": lambda c, ws, x, t: ["predict", c, x, "--workspace", ws],
    "predict --checkpoint WS": lambda c, ws, x, t: ["predict", c, x, "--checkpoint", ws],
    "export --workspace": lambda c, ws, x, t: [
        "export", c, "--workspace", ws, "--out", t / "m.safetensors"],
    "test": lambda c, ws, x, t: ["test", c, "-o", f"cluster.workspace={ws}", "--steps", "1"],
    "train --resume": lambda c, ws, x, t: [
        "train", c, "--workspace", ws, "--resume", "-o", "train_steps=60"],
}  # fmt: skip

FILES = {  # the newest checkpoint's three files
    "checkpoint file": "step40-worker0",
    "training-state file": "step40-worker0.state.npz",
    "checkpoint manifest": "step40-worker0.manifest.json",
}


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("what", FILES)
def test_a_fifo_in_the_newest_checkpoint_is_refused_naming_the_intact_one(
    job, tmp_path, command, what
):
    conf, ws, x = job
    fifo = ws / "checkpoint" / FILES[what]
    plant_fifo(fifo)
    res = singa(*COMMANDS[command](conf, ws, x, tmp_path))
    refused(res, fifo, what)
    assert "note: the newest intact checkpoint is step 20" in res.output


def test_the_same_fifo_given_explicitly_is_refused_with_the_same_words(job):
    conf, ws, x = job
    fifo = ws / "checkpoint" / "step40-worker0"
    plant_fifo(fifo)
    for args in (["predict", conf, x, "--checkpoint", fifo], ["test", conf, "--checkpoint", fifo]):
        res = singa(*args)
        assert res.exit_code == 2, res.output
        assert res.output.startswith(f"{fifo}: error: checkpoint"), res.output
        assert "is a named pipe, not a file" in res.output.splitlines()[0]


def test_a_fifo_checkpoint_without_manifest_is_passed_over_for_the_verified_one(job):
    conf, ws, x = job
    fifo = ws / "checkpoint" / "step60-worker0"
    plant_fifo(fifo)
    shutil.copy(ws / "checkpoint" / "step40-worker0.state.npz", str(fifo) + ".state.npz")
    res = singa("predict", conf, x, "--workspace", ws)
    assert res.exit_code == 0, res.output
    assert "checkpoint: " + str(ws / "checkpoint" / "step40-worker0") in res.output


@pytest.mark.parametrize(
    ("name", "what"),
    [
        ("metrics.jsonl", "metrics file"),
        (".singa.lock", "workspace lock"),
    ],
)
def test_a_fifo_in_the_workspace_is_refused_when_resuming(job, name, what):
    conf, ws, _ = job
    plant_fifo(ws / name)
    res = singa("train", conf, "--workspace", ws, "--resume", "-o", "train_steps=60")
    refused(res, ws / name, what)


def test_a_fifo_lock_record_is_never_read_and_never_replaced(job):
    conf, ws, _ = job
    record = ws / ".singa.lock.json"
    plant_fifo(record)
    res = singa("train", conf, "--workspace", ws, "--resume", "-o", "train_steps=60")
    assert res.exit_code == 2, res.output
    assert res.output.startswith(f"{record}: error: cannot write workspace lock record")
    assert "named pipe" in res.output.splitlines()[0]
    assert os.path.exists(record) and not os.path.isfile(record)  # left as it was


def test_the_readers_refuse_a_fifo_without_opening_it_for_long(tmp_path):
    from singa_core.errors import SingaError
    from singa_core.running import checkpoint as ck
    from singa_core.running.fileio import open_regular
    from singa_core.running.reporting import cut_torn_line, rewind_metrics
    from singa_core.running.workspace import read_holder

    fifo = tmp_path / "step5-worker0"
    os.mkfifo(fifo)
    with alarm("the readers"):
        for read in (ck.read_params, ck.read_state, ck.read_manifest_doc):
            target = fifo if read is not ck.read_manifest_doc else tmp_path / "x"
            if read is ck.read_manifest_doc:
                os.mkfifo(ck.manifest_path(target))
            with pytest.raises(SingaError, match="is a named pipe, not a file"):
                read(target)
        for read in (rewind_metrics, cut_torn_line):
            with pytest.raises(SingaError, match="metrics file .* is a named pipe, not a file"):
                read(fifo, *([5] if read is rewind_metrics else []))
        with pytest.raises(SingaError, match="is a named pipe, not a file"):
            open_regular(fifo, "file")
        os.mkfifo(tmp_path / ".singa.lock.json")
        assert read_holder(tmp_path) is None
    with pytest.raises(FileNotFoundError):
        open_regular(tmp_path / "missing")


def test_a_fifo_job_record_is_a_damaged_record_not_a_wait(tmp_path):
    from singa_core.api.jobs import DamagedRecord, read_exit, read_record

    folder = tmp_path / "job1"
    folder.mkdir()
    os.mkfifo(folder / "job.json")
    os.mkfifo(folder / "exit.json")
    with alarm("the job records"):
        with pytest.raises(DamagedRecord, match="named pipe"):
            read_record(folder)
        with pytest.raises(DamagedRecord, match="exit record is damaged"):
            read_exit(folder)
