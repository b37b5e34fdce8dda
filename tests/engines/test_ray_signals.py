"""Signals to a ray job (tests/engines/ray_signal_checks.py), run in a subprocess inside a
private network namespace (``unshare -n``, only loopback up) as test_ray_engine.py does."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tests.engines.test_ray_engine import _namespace_problem


def test_signals_to_a_ray_job_in_a_private_network_namespace():
    problem = _namespace_problem()
    if problem:
        pytest.skip(problem)
    env = dict(os.environ, SINGA_RAY_NETNS="1", RAY_USAGE_STATS_ENABLED="0")
    env.pop("RAY_ADDRESS", None)
    inner = "tests/engines/ray_signal_checks.py"
    cmd = f"ip link set lo up && exec {sys.executable} -m pytest -q -p no:cacheprovider " \
          f"--durations=0 {inner}"  # fmt: skip
    res = subprocess.run(
        ["unshare", "-n", "sh", "-c", cmd],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    print(res.stdout[-20000:])
    print(res.stderr[-5000:], file=sys.stderr)
    assert res.returncode == 0, res.stdout[-5000:]
    assert " passed" in res.stdout and "skipped" not in res.stdout.splitlines()[-1]
