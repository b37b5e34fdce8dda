"""Signals to a ``--engine ray`` job with its private runtime (issue 21), as schedulers send
them: SIGTERM/SIGINT to the whole process group (``setsid singa train ...`` then ``kill
-TERM -PGID``) or SIGTERM to the ``singa`` process alone stops the job with a checkpoint of
the last finished step (exit 143/130), leaves no process of the job's session and no
/dev/shm segment behind, and ``--resume`` ends with the parameters of an uninterrupted run.
A second signal aborts (only whole checkpoints left); a signal during start-up ends it
cleanly. tests/engines/test_ray_signals.py runs this module in a private network namespace
(``unshare -n``, loopback only); run directly, it skips."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, mlp_conf, write_csv_blobs

INSIDE = os.environ.get("SINGA_RAY_NETNS") == "1" and [
    name for _, name in socket.if_nameindex()
] == ["lo"]
pytestmark = pytest.mark.skipif(
    not INSIDE, reason="needs the private network namespace that test_ray_signals.py makes"
)

STEPS = 1500
FINAL = f"checkpoint/step{STEPS}-worker0"


def _cli(conf, ws, *extra):
    return [sys.executable, "-m", "singa_core.commands.cli", "train", str(conf), "--seed", "5",
            "-q", "--workspace", str(ws), "--no-tensorboard", "--engine", "ray",
            "-o", "cluster.server_worker_separate=true", *extra]  # fmt: skip


def _session(sid: int) -> dict[int, bytes]:
    """The live processes of session ``sid`` (pid: command line)."""
    out = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if os.getsid(int(pid)) == sid:
                    out[int(pid)] = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                pass
    return out


def _segments() -> set[str]:
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


def _steps(ws: Path) -> list[int]:
    return sorted(int(p.name[4:].split("-")[0]) for p in (ws / "checkpoint").glob("step*-worker0"))


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """(job.conf, workspace of an uninterrupted run)."""
    tmp = tmp_path_factory.mktemp("raysig")
    data = write_csv_blobs(tmp / "blobs.csv")
    conf = tmp / "job.conf"
    conf.write_text(mlp_conf(data, tmp / "unused", steps=STEPS, hidden=64).replace(
        "disp_freq: 10", "disp_freq: 1"))  # fmt: skip
    ref = tmp / "ref"
    res = subprocess.run(_cli(conf, ref), cwd=REPO, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    return conf, ref


def _run_and_signal(conf, ws, send, *, after_steps=20):
    """Start ``singa train`` in its own session, wait for ``after_steps`` train lines (None:
    for the runtime's first process), call ``send(proc)``; (exit status, stderr, sid)."""
    before = _segments()
    proc = subprocess.Popen(
        _cli(conf, ws), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        metrics = ws / "metrics.jsonl"
        while True:
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline
            if after_steps is None:
                if any(b"gcs_server" in c for c in _session(proc.pid).values()):
                    break
            elif metrics.exists() and metrics.read_text().count('"phase": "train"') >= after_steps:
                break
            time.sleep(0.02)
        pids = {str(p) for p in _session(proc.pid)}  # the job's, named in its segments
        send(proc)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    deadline = time.monotonic() + 10
    while _session(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _session(proc.pid) == {}  # nothing of the job's session is left: no actor either
    # the job's segments are named after its nodes (other Ray jobs on the machine may come
    # and go meanwhile); a job stopped before its start note made none
    nodes = set(re.findall(r"\(node (\w{12})\w*, pid \d+\)", err))
    left = {n for n in _segments() - before if n.startswith("singa-ray-")}
    assert {n for n in left if n.split("-")[2] in nodes} == set()
    others = {n for n in _segments() - before if not n.startswith("singa-ray-")}
    if os.environ.get("PYTEST_XDIST_WORKER"):  # tests beside this one make and drop their own
        others = {n for n in others if n.startswith("singa-") and n.split("-")[1] in pids}
    assert others == set()
    return proc.returncode, err


def _resume_matches(conf, ws, ref):
    res = subprocess.run(
        _cli(conf, ws, "--resume"), cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr
    assert (ws / FINAL).read_bytes() == (ref / FINAL).read_bytes()


@pytest.mark.parametrize(
    ("target", "sig", "code"),
    [
        ("group", signal.SIGTERM, 143),
        ("group", signal.SIGINT, 130),
        ("driver", signal.SIGTERM, 143),
    ],
)
def test_a_signal_checkpoints_exits_and_resumes_exactly(job, tmp_path, target, sig, code):
    conf, ref = job
    ws = tmp_path / "ws"

    def send(proc):
        if target == "group":
            os.killpg(proc.pid, sig)
        else:
            os.kill(proc.pid, sig)

    status, err = _run_and_signal(conf, ws, send)
    assert status == code, err
    assert "Traceback" not in err and "lost" not in err, err
    steps = _steps(ws)
    assert steps and 20 <= steps[-1] < STEPS, (steps, err)
    _resume_matches(conf, ws, ref)


def test_a_second_signal_aborts_leaving_whole_checkpoints(job, tmp_path):
    conf, _ = job
    ws = tmp_path / "ws"

    def twice(proc):
        os.killpg(proc.pid, signal.SIGTERM)
        time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGTERM)

    status, err = _run_and_signal(conf, ws, twice)
    assert status == 143, err
    assert "Traceback" not in err, err
    ckdir = ws / "checkpoint"  # none when the second signal came before the stop's checkpoint
    if ckdir.exists():
        assert not [p for p in ckdir.iterdir() if p.name.startswith(".") or "tmp" in p.name]
    if ckdir.exists() and _steps(ws):  # whatever was written is whole: a resume reads it
        res = subprocess.run(_cli(conf, ws, "--resume", "-o", f"train_steps={_steps(ws)[-1] + 1}"),
                             cwd=REPO, capture_output=True, text=True, timeout=300)  # fmt: skip
        assert res.returncode == 0, res.stderr


def test_a_signal_during_start_up_exits_cleanly(job, tmp_path):
    conf, _ = job
    status, err = _run_and_signal(
        conf, tmp_path / "ws", lambda proc: os.killpg(proc.pid, signal.SIGTERM), after_steps=None
    )
    assert status == 143, err
    assert "Traceback" not in err, err
