"""`singa tune --engine ray` on a token-checking cluster, inside a private network
namespace as every Ray test runs (tests/tuning/ray_tune_checks.py)."""

from __future__ import annotations

import pytest

from tests.engines.test_ray_engine import run_checks_in_private_network

pytest.importorskip("optuna")
pytestmark = pytest.mark.slow


def test_singa_tune_on_a_ray_cluster():
    run_checks_in_private_network("tests/tuning/ray_tune_checks.py")
