"""Side writers cannot hang or swallow a stop (issue 30): TensorBoard events are written by
the training thread itself (no tensorboardX writer thread whose death blocked training
forever), so a full disk under WORKSPACE/tensorboard/ ends the run like a full disk under
metrics.jsonl (exit 2 naming the event file and the free space of its own filesystem, the
checkpoints intact); the first SIGTERM stops a run that logs to TensorBoard with a
checkpoint; a torn last line of metrics.jsonl is cut before the next run appends."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest
from conftest import REPO, mlp_conf, write_csv_blobs

from singa_core import Job
from singa_core.errors import SingaError
from singa_core.running import checkpoint as ck
from singa_core.running.reporting import Reporter, cut_torn_line, write_failure

pytest.importorskip("tensorboardX")


def job_conf(tmp_path, steps=400, checkpoint_freq=10):
    conf = tmp_path / "job.conf"
    text = mlp_conf(write_csv_blobs(tmp_path / "blobs.csv"), tmp_path / "ws", steps=steps,
                    checkpoint_freq=checkpoint_freq)  # fmt: skip
    conf.write_text(text.replace("disp_freq: 10", "disp_freq: 1"))
    return conf, tmp_path / "ws"


def test_no_background_writer_thread(tmp_path):
    """What hung training: tensorboardX's _EventLoggerThread. None runs now."""
    from tensorboardX.event_file_writer import _EventLoggerThread

    conf, ws = job_conf(tmp_path, steps=30)
    seen = []
    job = Job.from_file(conf, seed=1, quiet=True, tensorboard=True)
    job.on("checkpoint", lambda ev: seen.append(list(threading.enumerate())))
    job.train()
    assert seen and not any(isinstance(t, _EventLoggerThread) for ts in seen for t in ts)
    assert list((ws / "tensorboard").glob("events.out.tfevents.*"))


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_event_file_write_failure_ends_the_run_with_checkpoints_intact(tmp_path):
    """ENOSPC injected on the event file's descriptor from step 20 on."""
    conf, ws = job_conf(tmp_path)
    job = Job.from_file(conf, seed=1, quiet=True, tensorboard=True)
    full = os.open("/dev/full", os.O_WRONLY)

    def disk_fills(ev):
        if ev.step == 20:
            for f in os.listdir("/proc/self/fd"):
                if "events.out.tfevents" in os.path.realpath(f"/proc/self/fd/{f}"):
                    os.dup2(full, int(f))

    job.on("checkpoint", disk_fills)
    try:
        with pytest.raises(SingaError) as info:
            job.train()
    finally:
        os.close(full)
    text = info.value.format()
    assert "cannot write TensorBoard event file" in text and "No space left on device" in text
    assert f"{ws / 'tensorboard'}/events.out.tfevents." in text
    assert "free on its filesystem" in text and "help:" in text
    steps = ck.checkpoint_steps(ws)
    assert 20 <= max(steps) < 400
    ck.verify_checkpoint(steps[max(steps)])


def test_full_tensorboard_filesystem_ends_the_run_naming_its_free_space(tmp_path):
    """A real full filesystem (a 12 KiB tmpfs) mounted at WORKSPACE/tensorboard: exit 2,
    not a hang; the free space quoted is the tmpfs's, not the workspace's."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare to mount a small filesystem privately")
    conf, ws = job_conf(tmp_path, steps=2000)
    (ws / "tensorboard").mkdir(parents=True)
    script = (
        f"mount -t tmpfs -o size=12k tmpfs {ws / 'tensorboard'} && exec {sys.executable} -m "
        f"singa_core.commands.cli train {conf} -q --seed 1"
    )
    res = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script],
        cwd=REPO, capture_output=True, text=True, timeout=600,  # a hang fails here
    )  # fmt: skip
    assert res.returncode == 2, res.stderr[-3000:]
    assert "cannot write TensorBoard event file" in res.stderr
    assert "No space left on device (0 B free on its filesystem)" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr and "Exception in thread" not in res.stderr
    steps = ck.checkpoint_steps(ws)
    assert steps and max(steps) < 2000
    ck.verify_checkpoint(steps[max(steps)])


def test_first_sigterm_stops_a_run_logging_to_tensorboard(tmp_path):
    conf, ws = job_conf(tmp_path, steps=10_000_000, checkpoint_freq=0)
    proc = subprocess.Popen(
        [sys.executable, "-m", "singa_core.commands.cli", "train", str(conf), "-q", "--seed",
         "1", "--tensorboard"],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while (
            not (ws / "metrics.jsonl").exists()
            or len((ws / "metrics.jsonl").read_text().splitlines()) < 30
        ):
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "the run did not start"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)  # once
        _, err = proc.communicate(timeout=120)  # a hang fails here
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err
    assert "Traceback" not in err
    steps = ck.checkpoint_steps(ws)
    assert steps and max(steps) > 0
    ck.verify_checkpoint(steps[max(steps)])


def test_torn_last_line_is_cut_before_a_new_run_appends(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"event": "start", "step": 0}\n{"phase": "train", "step": 1, "lo')
    err = []

    class Err:
        def write(self, s):
            err.append(s)

        def flush(self):
            pass

        def isatty(self):
            return False

    rep = Reporter(metrics_path=path, err=Err(), live=False, quiet=True, heartbeat_seconds=0)
    rep.start(0, 5)
    rep.metrics("Train", 1, {"loss": 1.0})
    rep.finish()
    lines = path.read_text().splitlines()
    assert [json.loads(x).get("event", "train") for x in lines] == ["start", "start", "train"]
    assert "cut a torn last line (33 bytes)" in "".join(err)


def test_cut_torn_line_cases(tmp_path):
    path = tmp_path / "m.jsonl"
    assert cut_torn_line(path) == 0  # absent
    path.write_bytes(b"")
    assert cut_torn_line(path) == 0
    path.write_bytes(b'{"a": 1}\n')
    assert cut_torn_line(path) == 0 and path.read_bytes() == b'{"a": 1}\n'
    path.write_bytes(b"no newline at all" * 10000)  # longer than one read block
    assert cut_torn_line(path) == 170000 and path.read_bytes() == b""
    path.write_bytes(b"x\n" + b"y" * 100000)
    assert cut_torn_line(path) == 100000 and path.read_bytes() == b"x\n"


def test_a_resumed_run_drops_the_torn_line_too(tmp_path):
    conf, ws = job_conf(tmp_path, steps=20, checkpoint_freq=10)
    Job.from_file(conf, seed=1, quiet=True, tensorboard=False).train()
    with open(ws / "metrics.jsonl", "a") as fh:
        fh.write('{"phase": "train", "st')
    conf.write_text(conf.read_text().replace("train_steps: 20", "train_steps: 30"))
    Job.from_file(conf, seed=1, quiet=True, tensorboard=False).train(resume=True)
    recs = [json.loads(line) for line in (ws / "metrics.jsonl").read_text().splitlines()]
    assert any(r.get("phase") == "train" and r["step"] == 29 for r in recs)


def test_write_failure_quotes_the_folder_of_its_own_filesystem(tmp_path):
    folder = tmp_path / "tb"
    folder.mkdir()
    err = write_failure(folder, OSError(28, "No space left on device"), "TensorBoard event file")
    assert "free on its filesystem" in err.message
    shutil.rmtree(folder)


def test_a_resume_with_nothing_left_to_train_cuts_the_torn_line_too(tmp_path):
    conf, ws = job_conf(tmp_path, steps=20, checkpoint_freq=10)
    Job.from_file(conf, seed=1, quiet=True, tensorboard=False).train()
    with open(ws / "metrics.jsonl", "a") as fh:
        fh.write('{"phase": "train", "st')
    result = Job.from_file(conf, seed=1, quiet=True, tensorboard=False).train(resume=True)
    assert result.trained is False
    text = (ws / "metrics.jsonl").read_text()
    assert text.endswith("\n") and not text.endswith('"st\n')
    for line in text.splitlines():  # every line is a whole record again
        json.loads(line)
