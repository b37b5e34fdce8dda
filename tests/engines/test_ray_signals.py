"""Signals to a ray job (tests/engines/ray_signal_checks.py), run in a subprocess inside a
private network namespace (``unshare -n``, only loopback up) as test_ray_engine.py does."""

from __future__ import annotations

import pytest

from tests.engines.test_ray_engine import run_checks_in_private_network

# in two parts (each makes its own reference run) so that pytest -n runs them side by side
PARTS = {
    "to-the-group": "exits_and_resumes_exactly and group",
    "to-the-driver-twice-at-start": "not (exits_and_resumes_exactly and group)",
}


@pytest.mark.slow  # Ray clusters in a private namespace: minutes, not seconds
@pytest.mark.parametrize("part", list(PARTS))
def test_signals_to_a_ray_job_in_a_private_network_namespace(part):
    run_checks_in_private_network("tests/engines/ray_signal_checks.py", f"-q -k '{PARTS[part]}'")
