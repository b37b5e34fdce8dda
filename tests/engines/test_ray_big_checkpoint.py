"""Checkpoints of any size through the Ray engine's driver (issue 21): a net with 610 MB of
Params (and as much momentum) trains on a private Ray runtime, the driver writes its
checkpoints, and ``--resume`` and ``singa test`` read them back. Run inside a private
network namespace (``unshare -n``, only loopback up), as the other Ray tests are."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tests.core.test_big_checkpoint import BIG_JOB, D, H, _records
from tests.engines.test_ray_engine import _namespace_problem

pytestmark = pytest.mark.slow


def test_the_ray_driver_writes_and_resumes_a_610_mb_checkpoint(tmp_path):
    problem = _namespace_problem()
    if problem:
        pytest.skip(problem)
    data = _records(tmp_path / "data.bin")
    ws = tmp_path / "ws"
    conf = tmp_path / "job.conf"
    conf.write_text(BIG_JOB.format(steps=4, ws=ws, data=data, d=D, h=H))
    singa = f"{sys.executable} -m singa_core.commands.cli"
    script = " && ".join([
        "ip link set lo up",
        f"{singa} train {conf} --engine ray -q -o train_steps=2",
        f"{singa} train {conf} --engine ray -q --resume",
        f"{singa} test {conf} --steps 1",
    ])  # fmt: skip
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", RAY_USAGE_STATS_ENABLED="0")
    env.pop("RAY_ADDRESS", None)
    env.pop("SINGA_MEMORY_AVAILABLE", None)
    res = subprocess.run(
        ["unshare", "-n", "sh", "-c", script],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "resuming at step 2" in res.stdout + res.stderr
    assert "finished at step 4" in res.stdout + res.stderr
    assert "Test (1 batches" in res.stdout
    for step in (2, 4):
        params = ws / "checkpoint" / f"step{step}-worker0"
        assert params.stat().st_size > 600_000_000
        assert (ws / "checkpoint" / f"step{step}-worker0.manifest.json").exists()
