"""Placement on what is free and GPUs on Ray (issue 37 points 5 and 6), on a 3-node Ray
cluster inside a private network namespace (tests/engines/test_ray_free_placement.py runs
this module under ``unshare -n`` with only loopback up; run directly, it skips).

The nodes: the head (1 CPU; the driver's node), ``wide`` (2 CPUs) and ``gpu`` (1 CPU,
declaring one GPU: ``num_gpus=1``, what ``ray start --num-gpus 1`` does). The test hook
``SINGA_RAY_STANDIN_GPU=1`` makes a worker on the stand-in device count as a GPU worker:
it asks Ray for a GPU, Ray places it on the ``gpu`` node and gives it that GPU's id, and the
stand-in (the CPU behind CuPy's rules) computes there. A "blocker" actor of this test holds
the head's CPU all along: the cluster is partly busy. Checks in order, one cluster."""

from __future__ import annotations

import os
import re
import socket
import time
from pathlib import Path

import pytest

from tests.conftest import mlp_conf, run_singa, write_csv_blobs

INSIDE = os.environ.get("SINGA_RAY_NETNS") == "1" and [
    name for _, name in socket.if_nameindex()
] == ["lo"]
pytestmark = [
    pytest.mark.skipif(
        not INSIDE,
        reason="needs the private network namespace that tests/engines/"
        "test_ray_free_placement.py makes",
    ),
    pytest.mark.slow,
]

STORE = 200 << 20


@pytest.fixture(scope="module")
def cluster():
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    import ray
    from ray.cluster_utils import Cluster
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    class Blocker:  # defined here: Ray's workers get it by value (this module is not theirs)
        def ping(self) -> str:
            return "here"

    c = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "include_dashboard": False, "object_store_memory": STORE},
    )
    try:
        c.add_node(num_cpus=2, object_store_memory=STORE)
        c.add_node(num_cpus=1, num_gpus=1, object_store_memory=STORE)
        c.wait_for_nodes()
        ray.init(address=c.address, include_dashboard=False, log_to_driver=False)
        head = ray.get_runtime_context().get_node_id()
        nodes = {n["NodeID"]: n["Resources"] for n in ray.nodes() if n["Alive"]}
        gpu = next(k for k, r in nodes.items() if r.get("GPU"))
        wide = next(k for k, r in nodes.items() if r.get("CPU") == 2)
        blocker = (
            ray.remote(Blocker)
            .options(num_cpus=1, scheduling_strategy=NodeAffinitySchedulingStrategy(head, False))
            .remote()
        )
        assert ray.get(blocker.ping.remote()) == "here"
        deadline = time.monotonic() + 10  # the head's raylet reports its CPU taken
        from ray._private.state import available_resources_per_node

        while available_resources_per_node().get(head, {}).get("CPU", 0) > 0:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        yield {"address": c.address, "head": head, "gpu": gpu, "wide": wide}
        ray.kill(blocker)
    finally:
        ray.shutdown()
        c.shutdown()


def _o(*pairs: str) -> list[str]:
    return [a for p in pairs for a in ("-o", p)]


def _job(tmp_path: Path, name: str) -> Path:
    data = tmp_path / "blobs.csv"
    if not data.exists():
        write_csv_blobs(data)
    conf = tmp_path / f"{name}.conf"
    conf.write_text(mlp_conf(data, tmp_path / f"ws-{name}", steps=20))
    return conf


def ray_train(cluster, conf, *args: str, env=None, timeout: int = 300):
    t0 = time.monotonic()
    res = run_singa(
        "train", str(conf), "--engine", "ray", "--address", cluster["address"], "--insecure",
        "-q", "--startup-timeout", "20", *args, env=env, timeout=timeout,
    )  # fmt: skip
    res.seconds = time.monotonic() - t0
    assert "Traceback" not in res.stderr, res.stderr
    _nothing_of_singa_left()
    return res


def _nothing_of_singa_left(wait: float = 10.0) -> None:
    from ray._private import state
    from ray.util.placement_group import placement_group_table

    deadline = time.monotonic() + wait
    while True:
        alive = [
            a
            for a in state.actors().values()
            if a["State"] != "DEAD" and not a["ActorClassName"].endswith("Blocker")
        ]
        groups = [g for g in placement_group_table().values() if g["state"] != "REMOVED"]
        if not alive and not groups:
            return
        assert time.monotonic() < deadline, (alive, groups)
        time.sleep(0.2)


def where(stderr: str) -> dict[str, tuple[str, str]]:
    """Process role -> (node id prefix, its GPU ids or "") from the engine's start note."""
    line = next(x for x in stderr.splitlines() if x.startswith("ray: "))
    return {
        m.group(1): (m.group(2), m.group(3) or "")
        for m in re.finditer(
            r"(\w+(?:\+\w+)? process \d+) \([^)]*\) on [\d.]+ \(node (\w+), pid \d+"
            r"(?:, GPU ([\d,]+))?\)",
            line,
        )
    }


STANDIN_GPU = {"SINGA_RAY_STANDIN_GPU": "1"}
HYBRID = [*_o("cluster.nworkers_per_group=2", "cluster.server_worker_separate=true",
              "test_steps=0"), "--device", "standin,cpu"]  # fmt: skip


def test_a_small_job_on_a_partly_busy_cluster_goes_where_cpus_are_free(cluster, tmp_path):
    """The head (the driver's node) is busy: a 1-CPU job is placed on a node with a free
    CPU and trains (it used to be planned on the head and wait there until Ray gave up)."""
    res = ray_train(cluster, _job(tmp_path, "small"))
    assert res.returncode == 0, res.stderr
    nodes = {node for node, _ in where(res.stderr).values()}
    assert nodes and not any(cluster["head"].startswith(n) for n in nodes), res.stderr
    dry = ray_train(cluster, _job(tmp_path, "small"), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "0 of 1 CPUs" in dry.stdout and "1 of 1 GPUs free" in dry.stdout, dry.stdout
    planned = re.findall(r"-> node [\d.]+ \(node (\w+)\)", dry.stdout)
    assert planned and not any(cluster["head"].startswith(n) for n in planned), dry.stdout


def test_a_job_that_does_not_fit_what_is_free_is_refused_before_waiting(cluster, tmp_path):
    conf = _job(tmp_path, "big")
    for extra in ([], ["--dry-run"]):
        res = ray_train(cluster, conf, *_o("cluster.nworker_groups=4"), *extra)
        assert res.returncode == 2, res.stderr
        assert "needs 4 CPUs" in res.stderr, res.stderr
        assert "only 3 of the Ray cluster's 4 are free" in res.stderr
        assert "0 of 1 CPUs" in res.stderr and "2 of 2 CPUs" in res.stderr
        assert "1 of 1 GPUs free" in res.stderr and "help:" in res.stderr
        assert "ray: " not in res.stderr  # no actor was started
        assert res.seconds < 15, res.seconds


def test_gpu_workers_go_to_the_gpu_node_and_cpu_workers_anywhere(cluster, tmp_path):
    """A hybrid group: worker 0 on the "GPU" (the stand-in), worker 1 on the CPU. Worker 0
    asks Ray for a GPU, lands on the node that has one and gets its id; worker 1 goes to
    another node (the GPU node's only CPU is taken). The dry-run shows the same plan."""
    conf = _job(tmp_path, "hybrid")
    dry = ray_train(cluster, conf, *HYBRID, "--dry-run", env=STANDIN_GPU)
    assert dry.returncode == 0, dry.stderr
    assert re.search(r"worker process 0 .*-> node [\d.]+ \(node (\w+)\) \(asks CPU 1, GPU 1\)",
                     dry.stdout), dry.stdout  # fmt: skip
    planned = dict(re.findall(r"(worker process \d) .*-> node [\d.]+ \(node (\w+)\)", dry.stdout))
    assert cluster["gpu"].startswith(planned["worker process 0"]), dry.stdout
    assert not cluster["gpu"].startswith(planned["worker process 1"]), dry.stdout
    res = ray_train(cluster, conf, *HYBRID, env=STANDIN_GPU)
    assert res.returncode == 0, res.stderr
    placed = where(res.stderr)
    node0, gpus0 = placed["worker process 0"]
    node1, gpus1 = placed["worker process 1"]
    assert cluster["gpu"].startswith(node0) and gpus0 == "0", res.stderr
    assert not cluster["gpu"].startswith(node1) and gpus1 == "", res.stderr
    assert node0 == planned["worker process 0"] and node1 == planned["worker process 1"]


def test_more_gpu_workers_than_the_cluster_has_gpus_is_refused_at_once(cluster, tmp_path):
    conf = _job(tmp_path, "gpus")
    args = [*_o("cluster.nworkers_per_group=2", "test_steps=0"), "--device", "standin"]
    res = ray_train(cluster, conf, *args, env=STANDIN_GPU)
    assert res.returncode == 2, res.stderr
    assert "--device: error: the job's workers ask for 2 GPUs" in res.stderr, res.stderr
    assert "has 1 free" in res.stderr and "0 of 0 GPUs" in res.stderr
    assert res.seconds < 15
    # without the hook the stand-in is no GPU: the same job runs on CPUs anywhere
    assert ray_train(cluster, conf, *args).returncode == 0


def test_a_gpu_conf_whose_node_has_no_cupy_is_refused_before_step_0(cluster, tmp_path):
    """``gpu: 0`` (no test hook: a real GPU worker). The only node with a GPU declares one
    it does not have and has no CuPy (as none of these nodes): the dry-run and the run
    both refuse the job before any actor starts, naming the process, that node and its
    own error, located at job.conf's gpu line, with that node's help."""
    conf = _job(tmp_path, "cuda")
    conf.write_text(conf.read_text() + "gpu: 0\n")
    line = len(conf.read_text().splitlines())
    gpu = cluster["gpu"][:12]
    for extra in (["--dry-run"], []):
        res = ray_train(cluster, conf, *extra)
        print(f"{' '.join(extra) or 'run'}: exit {res.returncode} in {res.seconds:.1f} s\n"
              f"{res.stdout[-800:]}{res.stderr[-1500:]}")  # fmt: skip
        assert res.returncode == 2, res.stderr
        assert f"{conf}:{line}:" in res.stderr, res.stderr  # the gpu field
        assert (
            f"process 0 (group 0, workers 0; server group 0, servers 0) would run on node "
            f"127.0.0.1 (node {gpu}), which cannot give it its GPU: cuda:0 needs CuPy, which "
            "is not installed"
        ) in res.stderr, res.stderr
        assert "help: on node 127.0.0.1" in res.stderr and "singa-classic[gpu]" in res.stderr
        assert "ray: " not in res.stderr and "step-" not in res.stdout  # no actor, no step
    dry = ray_train(cluster, conf, "--dry-run", "--device", "cpu")  # on CPUs it is planned
    assert dry.returncode == 0 and "device: worker 0 on cpu" in dry.stdout, dry.stderr


@pytest.mark.parametrize("how", ["raise", "exit"])
def test_a_process_that_dies_while_it_is_built_says_its_own_error(cluster, tmp_path, how):
    """The test hook SINGA_RAY_BREAK_BUILD makes process 0's actor fail in its
    constructor: with a Python error, the driver's message holds that error and its
    traceback; with its worker process exiting, what that process last wrote on its node.
    Never a bare ActorDiedError whose cause is only in a Ray log file."""
    conf = _job(tmp_path, f"broken-{how}")
    res = ray_train(cluster, conf, env={"SINGA_RAY_BREAK_BUILD": f"0:{how}"})
    print(f"exit {res.returncode} in {res.seconds:.1f} s\n{res.stderr[-2000:]}")
    assert res.returncode == 2, res.stderr
    assert "worker+server process 0 (group 0, workers 0; server group 0" in res.stderr
    if how == "raise":
        assert "failed while it was built on node 127.0.0.1 (Ray node" in res.stderr
        assert "RuntimeError: process 0 broke while it was built" in res.stderr
        assert re.search(r"note: at \S+process.py:\d+ in break_build", res.stderr)
    else:
        assert "it died while it was built; its last output on that node:" in res.stderr
        assert "singa test hook: process 0 breaks while it is built (exit)" in res.stderr
    assert "step-" not in res.stdout
