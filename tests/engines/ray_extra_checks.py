"""Run by tests/test_extras_alone.py inside a private network namespace: the `singa` of a
virtualenv holding only singa-classic[ray] (``$SINGA_EXTRA_VENV``) trains a small job on
Ray's private runtime and on a token-checking head at an address (started here with this
environment's Ray, as a cluster a user joins; stopped by its pid, never `ray stop`)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from singa_core.testing import blobs_csv, mlp_job

VENV = os.environ.get("SINGA_EXTRA_VENV")
pytestmark = pytest.mark.skipif(
    not VENV or os.environ.get("SINGA_RAY_NETNS") != "1",
    reason="run by tests/test_extras_alone.py in a private network namespace",
)
TOKEN = "fedcba9876543210" * 4


def _singa(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RAY_ADDRESS")}
    full.update(PATH=f"{VENV}/bin:{full.get('PATH', '')}", VIRTUAL_ENV=str(VENV), **(env or {}))
    return subprocess.run(
        [f"{VENV}/bin/singa", *args], env=full, capture_output=True, text=True, timeout=300
    )


def _conf(tmp_path: Path) -> Path:
    conf = tmp_path / "job.conf"
    conf.write_text(mlp_job(blobs_csv(tmp_path / "blobs.csv"), steps=6))
    return conf


def test_private_runtime(tmp_path):
    res = _singa("train", str(_conf(tmp_path)), "--engine", "ray", "--workspace",
                 str(tmp_path / "ws"), "-q")  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr


def test_a_cluster_at_an_address(tmp_path):
    from tests.engines.ray_auth_checks import Head

    head = Head(6379, token=TOKEN)
    try:
        res = _singa(
            "train", str(_conf(tmp_path)), "--engine", "ray", "--address", head.address,
            "--workspace", str(tmp_path / "ws"), "-q",
            env={"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": TOKEN},
        )  # fmt: skip
    finally:
        head.stop()
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
