"""Signals as schedulers send them (issue 21): SIGTERM to the whole process group (systemd,
scancel, timeout, kill -TERM -PGID) or to one process of a shm job stops it with a
checkpoint of the last finished step and exit 143; nothing is left behind; --resume
continues exactly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, mlp_conf, own_shm_segments, track, write_csv_blobs

# two worker processes (one partition each) and a server process
SHM = [
    "--engine", "shm", "-o", "cluster.server_worker_separate=true",
    "-o", "cluster.nworkers_per_group=2", "-o", "cluster.nworkers_per_procs=1",
]  # fmt: skip


def _cli(conf, ws, *extra):
    return [sys.executable, "-m", "singa_core.commands.cli", "train", str(conf), "--seed", "5",
            "-q", "--workspace", str(ws), "--no-tensorboard", *SHM, *extra]  # fmt: skip


def _group_members(pgid: int) -> list[int]:
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if os.getpgid(int(pid)) == pgid:
                    out.append(int(pid))
            except OSError:
                pass
    return out


def _shm_segments() -> set[str]:
    """The shm engine's segments of this test's own jobs (Ray jobs and other tests running in
    parallel make and remove their own names meanwhile)."""
    return own_shm_segments()


@pytest.mark.slow
@pytest.mark.parametrize("target", ["group", "one-child"])
def test_sigterm_to_a_shm_job_checkpoints_exits_143_and_resumes_exactly(tmp_path, target):
    data = write_csv_blobs(tmp_path / "blobs.csv")
    conf = tmp_path / "job.conf"
    conf.write_text(mlp_conf(data, tmp_path / "unused", steps=1500, hidden=64).replace(
        "disp_freq: 10", "disp_freq: 1"))  # fmt: skip
    ref = tmp_path / "ref"
    res = subprocess.run(_cli(conf, ref), cwd=REPO, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr

    ws = tmp_path / "ws"
    before = _shm_segments()
    proc = track(subprocess.Popen(  # setsid: its own process group, as a scheduler's job
        _cli(conf, ws), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    ))  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        metrics = ws / "metrics.jsonl"
        while not (metrics.exists() and metrics.read_text().count('"phase": "train"') >= 20):
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline
            time.sleep(0.02)
        if target == "group":
            os.killpg(proc.pid, signal.SIGTERM)
        else:
            children = [  # the job's processes (not multiprocessing's resource tracker)
                p
                for p in _group_members(proc.pid)
                if b"spawn_main" in Path(f"/proc/{p}/cmdline").read_bytes()
            ]
            assert children
            os.kill(children[0], signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 143, err
    assert "Traceback" not in err and "died" not in err
    steps = sorted(int(p.name[4:].split("-")[0]) for p in (ws / "checkpoint").glob("step*-worker0"))
    assert steps and 20 <= steps[-1] < 1500
    deadline = time.monotonic() + 5  # multiprocessing's resource tracker exits on its own
    while _group_members(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = {p: Path(f"/proc/{p}/cmdline").read_bytes() for p in _group_members(proc.pid)}
    assert left == {}  # no process left
    assert _shm_segments() - before == set()  # no segment left
    res = subprocess.run(
        _cli(conf, ws, "--resume"), cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, res.stderr
    final = "checkpoint/step1500-worker0"
    assert (ws / final).read_bytes() == (ref / final).read_bytes()
