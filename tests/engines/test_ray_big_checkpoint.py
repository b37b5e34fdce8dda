"""Checkpoints of any size through the Ray engine's driver (issue 21): a net with 610 MB of
Params (and as much momentum) trains on a private Ray runtime, the driver writes its
checkpoints, and ``--resume`` and ``singa test`` read them back. Run inside a private
network namespace (``unshare -n``, only loopback up), as the other Ray tests are."""

from __future__ import annotations

import sys

import pytest

from tests.core.test_big_checkpoint import BIG_JOB, D, H, _records
from tests.engines.test_ray_engine import run_in_private_network

pytestmark = pytest.mark.slow


def test_the_ray_driver_writes_and_resumes_a_610_mb_checkpoint(big_tmp_path):
    tmp_path = big_tmp_path
    data = _records(tmp_path / "data.bin")
    ws = tmp_path / "ws"
    conf = tmp_path / "job.conf"
    conf.write_text(BIG_JOB.format(steps=4, ws=ws, data=data, d=D, h=H))
    singa = f"{sys.executable} -m singa_core.commands.cli"
    script = " && ".join([
        "unset SINGA_MEMORY_AVAILABLE",
        f"{singa} train {conf} --engine ray -q -o train_steps=2",
        f"{singa} train {conf} --engine ray -q --resume",
        f"{singa} test {conf} --steps 1",
    ])  # fmt: skip
    res = run_in_private_network(script, timeout=600, OPENBLAS_NUM_THREADS="1")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "resuming at step 2" in res.stdout + res.stderr
    assert "finished at step 4" in res.stdout + res.stderr
    assert "Test (1 batches" in res.stdout
    for step in (2, 4):
        params = ws / "checkpoint" / f"step{step}-worker0"
        assert params.stat().st_size > 600_000_000
        assert (ws / "checkpoint" / f"step{step}-worker0.manifest.json").exists()
