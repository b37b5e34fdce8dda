"""Signals to a ray job's driver (tests/engines/ray_signal_checks.py, the checks
test_ray_signals.py leaves: SIGTERM to the driver alone, a second signal, a signal during
start-up), in a private network namespace."""

from __future__ import annotations

import pytest

from tests.engines.test_ray_engine import run_checks_in_private_network
from tests.engines.test_ray_signals import TO_THE_GROUP


@pytest.mark.slow  # Ray clusters in a private namespace: minutes, not seconds
def test_signals_to_a_ray_jobs_driver_in_a_private_network_namespace():
    where = f"not ({TO_THE_GROUP})"
    run_checks_in_private_network("tests/engines/ray_signal_checks.py", f"-q -k '{where}'")
