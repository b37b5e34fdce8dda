"""Run by tests/engines/test_ray_engine.py inside a private network namespace: the head's
GCS killed with -9 during training ends the job within 30 s with exit 2, naming the loss and
the newest checkpoint, and leaves none of the runtime's processes behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from singa_core.testing import blobs_csv, mlp_job
from tests.conftest import REPO

pytestmark = pytest.mark.skipif(
    os.environ.get("SINGA_RAY_NETNS") != "1", reason="run in a private network namespace"
)


def _children(root: int) -> list[int]:
    kids: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [root]
    while todo:
        for k in kids.get(todo.pop(), []):
            out.append(k)
            todo.append(k)
    return out


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def test_a_killed_gcs_ends_the_job_within_30_s_naming_the_checkpoint(tmp_path):
    conf = tmp_path / "job.conf"
    conf.write_text(mlp_job(blobs_csv(tmp_path / "blobs.csv"), steps=10**6)
                    .replace("disp_freq: 10", "disp_freq: 10\ncheckpoint_freq: 20"))  # fmt: skip
    log = open(tmp_path / "err", "w")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "singa_core.commands.cli", "train", str(conf), "--engine", "ray",
         "--workspace", str(tmp_path / "ws")],
        cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        while "Train step-40," not in (tmp_path / "err").read_text():
            assert proc.poll() is None, (tmp_path / "err").read_text()
            assert time.monotonic() < deadline, "training did not start"
            time.sleep(0.2)
        (gcs,) = [p for p in _children(proc.pid) if _name(p) == "gcs_server"]
        t0 = time.monotonic()
        os.kill(gcs, signal.SIGKILL)
        code = proc.wait(timeout=60)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()
    err = (tmp_path / "err").read_text()
    print(f"exit {code} {took:.1f} s after the GCS was killed")
    assert code == 2 and took < 30, err
    assert "error: the job stopped: lost the private Ray runtime's GCS" in err
    assert "the newest complete checkpoint is" in err and "--resume" in err
    assert "Traceback" not in err
    time.sleep(1.0)
    assert not _children(proc.pid)  # the runtime's processes ended with it
