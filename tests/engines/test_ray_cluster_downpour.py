"""Ray on a two-node cluster in a private network namespace: Downpour on real MNIST across the
two nodes (the acceptance run: 300 steps) (the "downpour" part of
tests/engines/ray_cluster_checks.py, in a module of its own so that pytest -n runs the parts
side by side)."""

from __future__ import annotations

import pytest

from tests.engines.test_ray_engine import run_cluster_checks


@pytest.mark.slow  # a Ray cluster in a private namespace: minutes, not seconds
def test_downpour_checks_on_a_two_node_cluster():
    run_cluster_checks("downpour")
