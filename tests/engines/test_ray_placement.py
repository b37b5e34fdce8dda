"""Where the Ray engine puts each SINGA process (plugins/engines/ray/placement.py) and the
bytes the placement is expected to move between nodes (plugins/engines/ray/traffic.py):
pure planning, no Ray runtime."""

from __future__ import annotations

import pytest
from singa_builtins.engines.ray import traffic
from singa_builtins.engines.ray.placement import STRATEGIES, plan, process_requests
from singa_builtins.engines.ray.runtime import Node
from singa_builtins.engines.shm.layout import ParamInfo, ParamLayout
from singa_builtins.engines.shm.topology import build_topology

from singa_core.errors import SingaError
from singa_core.schema import job_pb2

A = Node("a" * 56, "10.0.0.1", 4, 8e9)  # the driver's node
B = Node("b" * 56, "10.0.0.2", 4, 8e9)
N = 1 << 20  # values of the one Param


def _job(**cluster):
    topo = build_topology(job_pb2.ClusterProto(**cluster))
    layout = ParamLayout(
        [ParamInfo(0, "w", (N,), 0, N, True, 1.0, 1.0, 1)],
        topo.nservers_per_group,
        topo.nserver_groups,
    )
    return topo, layout, process_requests(topo, layout, 1, 1.0)


def _downpour():
    return _job(
        nworker_groups=2, nworkers_per_group=2, nservers_per_group=2, server_worker_separate=True
    )


def _groups_on(topo, node_of):
    return {g: {node_of[ps.index] for ps in topo.procs if any(w[0] == g for w in ps.workers)}
            for g in range(topo.nworker_groups)}  # fmt: skip


def test_group_keeps_each_worker_group_with_its_servers_and_spreads_the_groups():
    topo, layout, reqs = _downpour()
    node_of = plan(topo, reqs, [B, A], "group", first=A.id)
    assert _groups_on(topo, node_of) == {0: {A.id}, 1: {B.id}}
    servers = {node_of[ps.index] for ps in topo.procs if ps.servers}
    assert servers == {A.id}  # with group 0, on the driver's node
    exp = traffic.expected(topo, layout, node_of, 1, A.id)
    # only group 1 crosses, once per node and slice: a gradient out, a value back
    assert exp.params == 2 * 4 * N and exp.syncs == 0 and exp.checkpoint == 0


def test_spread_and_pack_as_documented_and_spread_moves_more_than_group():
    topo, layout, reqs = _downpour()
    spread = plan(topo, reqs, [A, B], "spread", first=A.id)
    assert [spread.count(A.id), spread.count(B.id)] == [3, 3]
    assert _groups_on(topo, spread)[0] == {A.id, B.id}  # a group split over both nodes
    group = plan(topo, reqs, [A, B], "group", first=A.id)
    e_spread = traffic.expected(topo, layout, spread, 1, A.id)
    e_group = traffic.expected(topo, layout, group, 1, A.id)
    assert e_spread.per_step == 2 * e_group.per_step
    pack = plan(topo, reqs, [A, B], "pack", first=A.id)
    assert set(pack) == {A.id}  # 4 CPUs: every worker process fits the first node
    assert traffic.expected(topo, layout, pack, 1, A.id).per_step == 0


def test_a_group_bigger_than_every_node_is_split_in_order_with_servers_beside_most_workers():
    topo, layout, reqs = _job(nworkers_per_group=3, nservers_per_group=2,
                              server_worker_separate=True)  # fmt: skip
    small_a, small_b = Node(A.id, A.address, 2, 8e9), Node(B.id, B.address, 2, 8e9)
    node_of = plan(topo, reqs, [small_a, small_b], "group", first=A.id)
    workers = [node_of[ps.index] for ps in topo.procs if ps.workers]
    assert workers == [A.id, A.id, B.id]
    assert {node_of[ps.index] for ps in topo.procs if ps.servers} == {A.id}
    exp = traffic.expected(topo, layout, node_of, 1, A.id)
    assert exp.split_groups == [0] and "bridge activations of group(s) 0" in traffic.describe(exp)


def test_hogwild_units_alternate_and_syncs_that_cross_are_counted():
    topo, layout, reqs = _job(nworker_groups=3, nserver_groups=3, nworkers_per_group=1,
                              nservers_per_group=1, sync_freq=2)  # fmt: skip
    node_of = plan(topo, reqs, [A, B], "group", first=A.id)
    assert node_of == [A.id, B.id, A.id]
    exp = traffic.expected(topo, layout, node_of, 1, A.id)
    assert exp.params == 0  # every group beside its own server group
    # one slice per server group's master copy; A holds server groups 0 and 2, B group 1:
    # the pairs (syncing group, master) on different nodes are (0,1), (1,0), (1,2), (2,1),
    # each both ways every 2 updates
    size = {s.master: s.size for s in layout.slices}
    assert sorted(size) == [0, 1, 2]
    assert exp.syncs == pytest.approx(2 * 4 / 2 * (2 * size[1] + size[0] + size[2]))


def test_the_first_unit_goes_to_the_driver_node_and_checkpoints_cost_nothing_there():
    topo, layout, reqs = _downpour()
    big_b = Node(B.id, B.address, 16, 8e9)
    node_of = plan(topo, reqs, [A, big_b], "group", first=A.id)
    assert {node_of[ps.index] for ps in topo.procs if ps.servers} == {A.id}
    away = plan(topo, reqs, [A, big_b], "group", first=big_b.id)
    exp = traffic.expected(topo, layout, away, 1, A.id)  # written on A, servers on B
    assert exp.checkpoint == 4 * N * 2  # values and one updater state array


def test_a_process_that_fits_nowhere_is_a_clean_error():
    topo, layout, reqs = _job(nworkers_per_group=2, nworkers_per_procs=2)
    tiny = [Node(A.id, A.address, 1, 8e9), Node(B.id, B.address, 1, 8e9)]
    with pytest.raises(SingaError) as err:
        plan(topo, reqs, tiny, "group", first=A.id)
    assert "fits on no node" in str(err.value) and err.value.help


def test_the_default_placement_is_group():
    assert STRATEGIES[0] == "group"
    from singa_builtins.engines.ray.engine import RayOptions

    assert RayOptions().placement == "group"


def test_traffic_note_reports_per_step_bytes_and_the_model():
    exp = traffic.Expected(params=96e6)
    text = traffic.note(
        {"grad_bytes": 48e6 * 10, "value_bytes": 48e6 * 10, "sync_bytes": 0,
         "value_copies": 20, "value_answers": 20}, 10, exp)  # fmt: skip
    assert "96 MB per step over 10 step(s)" in text
    assert "the placement's model: 96 MB per step" in text
    assert traffic.mb(191.6e6) == "191.6" and traffic.mb(0.2621e6) == "0.262"
    assert traffic.note({"grad_bytes": 0}, 10, traffic.Expected()) is None


def test_a_refusal_looks_again_only_when_live_placement_groups_do_not_explain_the_use():
    """Issue 44 point 8: a job that does not fit what is free is refused at once when live
    placement groups hold all that is in use (another look would say the same); only an
    unexplained use (a job that ended a moment ago, its release not yet in Ray's view) gets
    more looks. REMOVED or PENDING placement groups hold nothing."""
    from singa_builtins.engines.ray.runtime import free_view_settled, held_by_placement_groups

    table = {
        "pg1": {"state": "CREATED", "bundles": {0: {"CPU": 1.0, "memory": 2e9}, 1: {"CPU": 1.0}},
                "bundles_to_node_id": {0: A.id, 1: B.id}},
        "pg2": {"state": "REMOVED", "bundles": {0: {"CPU": 2.0}},
                "bundles_to_node_id": {0: A.id}},
        "pg3": {"state": "PENDING", "bundles": {0: {"CPU": 1.0}}, "bundles_to_node_id": {}},
    }  # fmt: skip
    held = held_by_placement_groups(table)
    assert held == {A.id: {"CPU": 1.0, "memory": 2e9, "GPU": 0.0},
                    B.id: {"CPU": 1.0, "memory": 0.0, "GPU": 0.0}}  # fmt: skip
    a = Node(A.id, A.address, 4, 8e9, free_cpus=3, free_memory=6e9, free_gpus=0)
    b = Node(B.id, B.address, 4, 8e9, free_cpus=3, free_memory=8e9, free_gpus=0)
    assert free_view_settled([a, b], held)
    # pg2's 2 CPUs still shown as used on A: its release has not reached Ray's view yet
    lagging = Node(A.id, A.address, 4, 8e9, free_cpus=1, free_memory=6e9, free_gpus=0)
    assert not free_view_settled([lagging, b], held)
    # nothing known about what is free (an older Ray): the totals, nothing in use
    assert free_view_settled([A, B], {})
