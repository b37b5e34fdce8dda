"""Signals to a ray job (tests/engines/ray_signal_checks.py), run in a subprocess inside a
private network namespace (``unshare -n``, only loopback up) as test_ray_engine.py does:
SIGTERM and SIGINT to the job's process group. The other half (to the driver alone, twice,
during start-up) is test_ray_signals_to_the_driver.py, so that pytest -n runs both at once."""

from __future__ import annotations

import pytest

from tests.engines.test_ray_engine import run_checks_in_private_network

TO_THE_GROUP = "exits_and_resumes_exactly and group"


@pytest.mark.slow  # Ray clusters in a private namespace: minutes, not seconds
def test_signals_to_a_ray_jobs_group_in_a_private_network_namespace():
    run_checks_in_private_network("tests/engines/ray_signal_checks.py", f"-q -k '{TO_THE_GROUP}'")
