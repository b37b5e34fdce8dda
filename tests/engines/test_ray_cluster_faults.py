"""Ray on a two-node cluster in a private network namespace: killed workers, servers, raylets
and nodes; restarts, SIGINT, leftovers, start-up deadlines (the "faults" part of
tests/engines/ray_cluster_checks.py, in a module of its own so that pytest -n runs the parts
side by side)."""

from __future__ import annotations

import pytest

from tests.engines.test_ray_engine import run_cluster_checks


@pytest.mark.slow  # a Ray cluster in a private namespace: minutes, not seconds
def test_faults_checks_on_a_two_node_cluster():
    run_cluster_checks("faults")
