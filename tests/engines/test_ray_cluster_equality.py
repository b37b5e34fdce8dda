"""Ray on a two-node cluster in a private network namespace: Sandblaster, devices, partitions
and placement equal to shm and in-process; dry runs (the "equality" part of
tests/engines/ray_cluster_checks.py, in a module of its own so that pytest -n runs the parts
side by side)."""

from __future__ import annotations

import pytest

from tests.engines.test_ray_engine import run_cluster_checks


@pytest.mark.slow  # a Ray cluster in a private namespace: minutes, not seconds
def test_equality_checks_on_a_two_node_cluster():
    run_cluster_checks("equality")
