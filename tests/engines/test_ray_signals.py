"""Signals to a ray job (tests/engines/ray_signal_checks.py), run in a subprocess inside a
private network namespace (``unshare -n``, only loopback up) as test_ray_engine.py does."""

from __future__ import annotations

import pytest

from tests.engines.test_ray_engine import run_checks_in_private_network


@pytest.mark.slow  # Ray clusters in a private namespace: minutes, not seconds
def test_signals_to_a_ray_job_in_a_private_network_namespace():
    run_checks_in_private_network("tests/engines/ray_signal_checks.py")
