"""Placement on what is free, and GPUs on Ray (issue 37 points 5 and 6).

Pure planning first (no Ray runtime): a job is planned on each node's free CPUs, memory and
GPUs; one that does not fit is refused before anything waits, naming each node's free
resources; a worker on a GPU asks Ray for one (``num_gpus`` in its bundle), goes to a node
with a free GPU, and a hybrid group's CPU workers go anywhere. Then the same on a Ray
cluster (tests/engines/ray_placement_checks.py, in a private network namespace): three
nodes, one of them declaring a GPU (``ray start --num-gpus 1``), with the stand-in device
standing for the GPU (``SINGA_RAY_STANDIN_GPU=1``)."""

from __future__ import annotations

import dataclasses

import pytest
from singa_builtins.engines.ray.placement import (
    STANDIN_GPU_ENV,
    check_fits,
    is_gpu_spec,
    plan,
    process_requests,
)
from singa_builtins.engines.ray.runtime import Node
from singa_builtins.engines.shm.layout import ParamInfo, ParamLayout
from singa_builtins.engines.shm.topology import build_topology

from singa_core.errors import SingaError
from singa_core.schema import job_pb2

GIB = float(1 << 30)
A = Node("a" * 56, "10.0.0.1", 2, 8 * GIB, free_cpus=0, free_memory=8 * GIB)  # busy driver
B = Node("b" * 56, "10.0.0.2", 2, 8 * GIB, free_cpus=2, free_memory=8 * GIB)
G = Node("c" * 56, "10.0.0.3", 2, 8 * GIB, gpus=1, free_cpus=2, free_memory=8 * GIB,
         free_gpus=1)  # fmt: skip


def _job(specs=(), **cluster):
    topo = build_topology(job_pb2.ClusterProto(**cluster))
    layout = ParamLayout(
        [ParamInfo(0, "w", (1024,), 0, 1024, True, 1.0, 1.0, 1)],
        topo.nservers_per_group,
        topo.nserver_groups,
    )
    return topo, process_requests(topo, layout, 1, 1.0, list(specs))


def _locate(field):
    return f"job.conf ({field})"


def test_a_job_that_fits_beside_another_is_placed_where_it_is_free():
    """The driver's node is busy (its CPUs held by another job): the 1-CPU job goes to
    the node with free CPUs, not onto the driver's node to wait there."""
    topo, reqs = _job()
    check_fits(reqs, [A, B], 1.0, _locate)
    assert set(plan(topo, reqs, [A, B], "group", first=A.id)) == {B.id}
    for strategy in ("spread", "pack"):
        assert set(plan(topo, reqs, [A, B], strategy, first=A.id)) == {B.id}


def test_a_job_that_does_not_fit_what_is_free_is_refused_naming_each_nodes_free_room():
    topo, reqs = _job(nworker_groups=3)
    with pytest.raises(SingaError) as err:
        check_fits(reqs, [A, B], 1.0, _locate)
    text = err.value.format()
    assert "needs 3 CPUs" in text and "only 2 of the Ray cluster's 4 are free" in text
    assert "10.0.0.1 (node aaaaaaaaaaaa): 0 of 2 CPUs, 8.0 of 8.0 GiB memory, 0 of 0 GPUs" in text
    assert "10.0.0.2 (node bbbbbbbbbbbb): 2 of 2 CPUs" in text and "help:" in text
    # a process bigger than any node's free room
    topo, reqs = _job(nworkers_per_group=2, nworkers_per_procs=2)
    busy_b = dataclasses.replace(B, free_cpus=1)
    with pytest.raises(SingaError, match="no node has more than 1 free"):
        check_fits(reqs, [A, busy_b, dataclasses.replace(G, free_cpus=1)], 1.0, _locate)


def test_gpu_specs_and_the_stand_in_hook(monkeypatch):
    monkeypatch.delenv(STANDIN_GPU_ENV, raising=False)
    assert is_gpu_spec("cuda:1") and is_gpu_spec("cuda") and not is_gpu_spec("cpu")
    assert not is_gpu_spec("standin")
    monkeypatch.setenv(STANDIN_GPU_ENV, "1")
    assert is_gpu_spec("standin")


def test_gpu_workers_ask_for_gpus_and_go_to_gpu_nodes_the_cpu_workers_anywhere():
    """A hybrid group (worker 0 on a GPU, worker 1 on the CPU, a process each): worker 0's
    bundle asks for a GPU and is planned on the GPU node; worker 1 goes to a node without
    one (keeping the GPU node's CPUs for GPU workers)."""
    topo, reqs = _job(["cuda:0", "cpu"], nworkers_per_group=2, server_worker_separate=True)
    assert [r.gpus for r in reqs] == [1.0, 0.0, 0.0]
    assert reqs[0].bundle() == {"CPU": 1.0, "GPU": 1.0}
    check_fits(reqs, [B, G], 1.0, _locate)
    for strategy in ("spread", "pack"):
        node_of = plan(topo, reqs, [B, G], strategy, first=B.id)
        assert node_of[0] == G.id, (strategy, node_of)
        assert node_of[1] == B.id, (strategy, node_of)
    # group puts the GPU worker on the GPU node and the CPU worker and the server on the
    # node without GPUs, which has room for them (issue 44: nodes without GPUs first)
    assert plan(topo, reqs, [B, G], "group", first=B.id) == [G.id, B.id, B.id]
    assert plan(topo, reqs, [G, B], "group", first=G.id) == [G.id, B.id, B.id]
    # ... and splits it where that node has no room for all: the GPU worker stays there
    small = dataclasses.replace(G, free_cpus=1)
    node_of = plan(topo, reqs, [B, small], "group", first=B.id)
    assert node_of[:2] == [G.id, B.id], node_of
    # two workers of one process on one GPU (SINGA 0.3: both on gpu[0]) ask for one
    _, reqs = _job(["cuda:0", "cuda:0"], nworkers_per_group=2, nworkers_per_procs=2)
    assert reqs[0].gpus == 1.0


def test_more_gpus_than_the_cluster_has_free_is_located_at_the_gpu_field():
    topo, reqs = _job(["cuda:0", "cuda:1"], nworkers_per_group=2)
    with pytest.raises(SingaError) as err:
        check_fits(reqs, [B, G], 1.0, _locate, "job.conf:3:1 (gpu)")
    text = err.value.format()
    assert "ask for 2 GPUs but the Ray cluster has 1 free" in text and "job.conf:3:1" in text
    assert "10.0.0.3 (node cccccccccccc): 2 of 2 CPUs, 8.0 of 8.0 GiB memory, 1 of 1 GPUs" in text
    assert "--num-gpus" in text
    held = dataclasses.replace(G, free_gpus=0)
    topo, reqs = _job(["cuda:0"])
    with pytest.raises(SingaError, match=r"has 0 free \(1 in all, others held by other jobs\)"):
        check_fits(reqs, [B, held], 1.0, _locate)


def test_an_actor_opens_the_gpus_ray_gave_it_in_order():
    from singa_builtins.engines.ray.process import actor_devices
    from singa_builtins.engines.shm.topology import ProcSpec

    @dataclasses.dataclass
    class Shared:
        device_specs: list

    shared = Shared(["cuda:3", "cpu", "cuda:5"])
    both = ProcSpec(0, ((0, 0), (0, 2)), ())
    assert actor_devices(shared, both).device_specs == ["cuda:0", "cpu", "cuda:1"]
    other = ProcSpec(1, ((0, 1),), ())
    assert actor_devices(shared, other).device_specs == ["cpu", "cpu", "cpu"]
    assert actor_devices(Shared(["standin", "cpu"]), both).device_specs == ["standin", "cpu"]


def test_the_driver_opens_no_gpu_for_a_ray_job(tmp_path):
    """job.conf's gpu on a Ray job: this machine (no GPU) prepares the nets on the CPU and
    hands the workers' device specs to the engine; a bad --device is still located here."""
    from singa_core.api.job import _cluster_devices
    from singa_core.jobconf.parse import load_job

    conf = tmp_path / "job.conf"
    conf.write_text("gpu: 2\ncluster { nworkers_per_group: 2 }\n")
    cfg = load_job(conf, [])
    assert _cluster_devices(cfg, None) == ("cpu,cpu", ["cuda:2", "cpu"])
    assert _cluster_devices(cfg, "cuda:1,cpu") == ("cpu,cpu", ["cuda:1", "cpu"])
    assert _cluster_devices(cfg, "standin") == ("standin", None)
    with pytest.raises(SingaError, match="--device"):
        _cluster_devices(cfg, "tpu:0")


def test_the_gpu_check_asks_each_gpu_process_node_and_a_node_without_cupy_says_so():
    """Which processes' nodes open GPUs before the actors (gpucheck.py), and what a node
    without CuPy answers (this machine has none: the node's own error and help)."""
    from singa_builtins.engines.ray.gpucheck import gpu_processes, open_gpus

    specs = ["cuda:0", "cpu"]
    topo, reqs = _job(specs, nworkers_per_group=2, nworkers_per_procs=1)
    found = gpu_processes(topo, reqs, specs, lambda j: f"job.conf:{7 + j}:1")
    assert found == [(0, 1, "job.conf:7:1")]
    stand = ["standin", "cpu"]  # the stand-in is the CPU everywhere: nothing to open
    topo, reqs = _job(stand, nworkers_per_group=2, nworkers_per_procs=1)
    assert gpu_processes(topo, reqs, stand, str) == []
    try:
        import cupy  # noqa: F401
    except ImportError:
        answer = open_gpus(1, "job.conf:7:1")
        assert answer["error"]["message"].startswith("cuda:0 needs CuPy, which is not installed")
        assert "singa-classic[gpu]" in answer["error"]["help"]


def test_a_dead_actors_own_error_is_read_from_rays_text():
    from singa_builtins.engines.ray.startup import creation_error, dead_pid

    init = (
        "The actor died because of an error raised in its creation task, \x1b[36mray::"
        "SingaProcess.__init__()\x1b[39m (pid=2046, ip=10.0.0.2, actor_id=3e0e)\n"
        '  File "/x/process.py", line 9, in __init__\n    raise ValueError("no")\n'
        "ValueError: the store\nhas two lines"
    )
    assert creation_error(init) == "ValueError: the store\nhas two lines"
    assert dead_pid(init) == 2046
    died = "The actor died unexpectedly before finishing this task.\n\tclass_name: A\n\tpid: 77\n"
    assert creation_error(died) == "" and dead_pid(died) == 77


def test_the_dry_runs_device_lines_name_the_clusters_gpu():
    from singa_core.running.job import PreparedJob

    prepared = PreparedJob.__new__(PreparedJob)
    prepared.remote_device_specs = ["cuda:0", "cpu"]
    assert prepared.device_lines() == [
        "device: worker 0 on a GPU of the Ray node that runs it (cuda:0 in the job; opened "
        "there before step 0, not on this machine)",
        "device: worker 1 on cpu",
    ]


@pytest.mark.slow  # a 3-node Ray cluster in a private namespace
def test_placement_and_gpus_on_a_cluster():
    from tests.engines.test_ray_engine import run_checks_in_private_network

    run_checks_in_private_network("tests/engines/ray_placement_checks.py", "-q -s")
