"""The Ray engine (plugins/engines/ray/engine.py).

Without a cluster: importing the plugin does not import Ray, a missing Ray is a clean
error with the pip command, bad engine options are located errors. With a cluster:
tests/engines/ray_cluster_checks.py, run here in a subprocess inside a private network
namespace (``unshare -n``, only loopback up) where it starts a 2-node Ray cluster; its
output is shown and it must pass."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import (
    REPO,
    mlp_conf,
    need_extra,
    needs,
    run_singa,
    shared_data_dir,
    write_csv_blobs,
)

PIP = "pip install 'singa-classic[ray]'"


def _job(tmp_path):
    data = tmp_path / "blobs.csv"
    write_csv_blobs(data)
    conf = tmp_path / "job.conf"
    conf.write_text(mlp_conf(data, tmp_path / "ws"))
    return conf


def test_importing_the_plugin_does_not_import_ray():
    code = (
        "import sys, singa_builtins.engines.ray.engine, singa_builtins.engines.ray.driver; "
        "from singa_core.plugin_host.host import get_host; get_host().get('engine', 'ray'); "
        "assert 'ray' not in sys.modules, 'ray imported'"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


@pytest.mark.slow
def test_without_ray_the_engine_is_listed_and_asking_for_it_says_how_to_install(tmp_path):
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text("import sys\nsys.modules['ray'] = None\n")
    env = {"PYTHONPATH": os.pathsep.join([str(hide), os.environ.get("PYTHONPATH", "")])}
    res = run_singa("list-plugins", env=env)
    assert res.returncode == 0, res.stderr
    assert f"ray (needs Ray: {PIP})" in res.stdout, res.stdout
    res = run_singa("train", str(_job(tmp_path)), "--engine", "ray", env=env)
    assert res.returncode == 2
    assert PIP in res.stderr and "Traceback" not in res.stderr, res.stderr


@needs("ray")  # without Ray, --engine ray stops at that first (the test above)
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--engine", "ray", "--placement", "round"], "placement is 'round'"),
        (["--engine", "ray", "--max-restarts", "-1"], "max-restarts is '-1'"),
        (["--engine", "ray", "--engine-option", "cpus_per_worker=0"], "cpus-per-worker is '0'"),
        (["--engine", "ray", "--engine-option", "cpus"], "is not KEY=VALUE"),
        (["--engine", "ray", "--engine-option", "ray_log=loud"], "ray-log is 'loud'"),
        (["--engine", "shm", "--address", "auto"], "engine 'shm' has no option address"),
    ],
)
def test_bad_engine_options_are_clean_errors(tmp_path, args, message):
    res = run_singa("train", str(_job(tmp_path)), "--dry-run", *args)
    assert res.returncode == 2
    assert message in res.stderr and "help:" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


def test_a_store_missing_on_a_node_is_a_located_error():
    from singa_builtins.engines.ray.dryrun import check_stores
    from singa_builtins.engines.ray.runtime import Node

    from singa_core.errors import SingaError

    nodes = [Node("a" * 56, "10.0.0.1", 4, 1e9), Node("b" * 56, "10.0.0.2", 4, 1e9)]
    fields = [("neuralnet.layer[0].store_conf.path", "data/train.bin")]

    def missing_on_second(nodes, cwd, paths):
        return {nodes[0].id: [], nodes[1].id: list(paths)}

    with pytest.raises(SingaError) as err:
        check_stores(fields, nodes, "/work", lambda f: f"job.conf ({f})", missing_on_second)
    text = err.value.format()
    assert "store data/train.bin does not exist on node 10.0.0.2 (node bbbbbbbbbbbb)" in text
    assert "job.conf (neuralnet.layer[0].store_conf.path)" in text and "help:" in text
    check_stores(fields, nodes, "/work", str, lambda n, c, p: {x.id: [] for x in n})


def test_dry_run_names_gateways_and_checks_dev_shm_on_every_node():
    """The dry-run's shared-memory lines for 4 workers of a group in their own processes, 2
    per node, the server beside two of them: the other node's gateway is named, each node's
    /dev/shm need is shown, and a node with too little room is an error naming it."""
    from singa_builtins.engines.ray.dryrun import shared_memory_lines
    from singa_builtins.engines.ray.runtime import Node
    from singa_builtins.engines.shm.layout import ParamInfo, ParamLayout
    from singa_builtins.engines.shm.topology import build_topology

    from singa_core.errors import SingaError
    from singa_core.schema import job_pb2

    topo = build_topology(job_pb2.ClusterProto(nworkers_per_group=4, server_worker_separate=True))
    layout = ParamLayout([ParamInfo(0, "w", (1 << 18,), 0, 1 << 18, True, 1.0, 1.0, 4)], 1, 1)
    a, b = Node("a" * 56, "10.0.0.1", 2, 1e9), Node("b" * 56, "10.0.0.2", 2, 1e9)
    node_of = [a.id, a.id, b.id, b.id, a.id]  # workers 0, 1 and the server on a

    def roomy(nodes):
        return {n.id: 64 << 20 for n in nodes}

    lines = shared_memory_lines(topo, layout, [a, b], node_of, roomy)
    assert lines[0] == (
        "  gateway: process 2 for the 2 workers of group 0 on node 10.0.0.2 (node "
        "bbbbbbbbbbbb) (one summed gradient out and one value in per slice)"
    )
    assert lines[1] == (
        "  shared memory (/dev/shm) training touches: 10.0.0.1 (node aaaaaaaaaaaa) 3 of 64 "
        "MiB free, 10.0.0.2 (node bbbbbbbbbbbb) 3 of 64 MiB free"
    )  # 1 MiB of values + 2 gradient buffers on a; 2 gradient buffers + the mirror on b
    with pytest.raises(SingaError) as err:
        shared_memory_lines(topo, layout, [a, b], node_of, lambda nodes: {a.id: 64 << 20,
                            b.id: 2 << 20})  # fmt: skip
    assert "needs 3 MiB of shared memory on node 10.0.0.2 (node bbbbbbbbbbbb)" in str(err.value)


def _namespace_problem() -> str | None:
    if not sys.platform.startswith("linux") or shutil.which("unshare") is None:
        return "needs Linux with unshare(1) for a private network namespace"
    if shutil.which("ip") is None:
        return "needs ip(8) to bring up loopback in the namespace"
    probe = subprocess.run(
        ["unshare", "-n", "sh", "-c", "ip link set lo up"], capture_output=True, text=True
    )
    if probe.returncode != 0:
        return f"cannot create a network namespace here (root needed): {probe.stderr.strip()}"
    return None


def run_in_private_network(
    script: str, *, timeout: int = 900, **env
) -> subprocess.CompletedProcess:
    """``script`` (sh) inside a new network namespace with only loopback up, Ray's usage
    statistics off and no RAY_ADDRESS (nothing can reach another machine); skips the
    test where such a namespace cannot be made."""
    problem = _namespace_problem()
    if problem:
        pytest.skip(problem)
    full = dict(os.environ, SINGA_RAY_NETNS="1", RAY_USAGE_STATS_ENABLED="0", **env)
    full.setdefault("SINGA_DATA", str(shared_data_dir()))
    full.pop("RAY_ADDRESS", None)
    return subprocess.run(
        ["unshare", "-n", "sh", "-c", f"ip link set lo up && {script}"],
        cwd=REPO, env=full, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def run_checks_in_private_network(module: str, pytest_args: str = "-q") -> None:
    """Run the pytest module ``module`` (the checks of a Ray job) in a private network
    namespace; its output is printed, and every check must pass (none skipped). Skipped,
    naming the 'ray' extra, where Ray is not installed."""
    need_extra("ray")
    args = f"{pytest_args} -p no:cacheprovider --durations=0"
    res = run_in_private_network(f"exec {sys.executable} -m pytest {args} {module}")
    print(res.stdout[-20000:])
    print(res.stderr[-5000:], file=sys.stderr)
    assert res.returncode == 0, res.stdout[-5000:]
    assert " passed" in res.stdout and "skipped" not in res.stdout.splitlines()[-1]


# ray_cluster_checks.py in parts, each run by a test module of its own
# (tests/engines/test_ray_cluster_<part>.py) with a two-node cluster of its own, so that
# pytest -n (a file at a time) spreads them over its workers: each takes minutes
CLUSTER_CHECK_PARTS = {
    "downpour": "test_frameworks_train_mnist and downpour",
    "hogwild": "test_frameworks_train_mnist and not downpour",
    "faults": "killed or restarts or sigint or segments or start_up or losing or raylet",
    "equality": "not test_frameworks_train_mnist and not (killed or restarts or sigint or "
    "segments or start_up or losing or raylet)",
}


def run_cluster_checks(part: str) -> None:
    """The checks of ray_cluster_checks.py that ``part`` selects, in a private network."""
    where = CLUSTER_CHECK_PARTS[part]
    run_checks_in_private_network("tests/engines/ray_cluster_checks.py", f"-q -s -k '{where}'")


@pytest.mark.slow  # five collections of the checks
def test_the_cluster_check_parts_select_every_check_once():
    """The parts together are the whole of ray_cluster_checks.py, none twice."""
    ids = []
    for where in CLUSTER_CHECK_PARTS.values():
        res = subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
             "tests/engines/ray_cluster_checks.py", "-k", where],
            cwd=REPO, capture_output=True, text=True,
        )  # fmt: skip
        ids += [x for x in res.stdout.splitlines() if "::" in x]
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "tests/engines/ray_cluster_checks.py"],
        cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip
    every = [x for x in res.stdout.splitlines() if "::" in x]
    assert every and sorted(ids) == sorted(every), (ids, every)


@pytest.mark.slow
def test_the_heads_loss_is_located_within_30_s():
    run_checks_in_private_network("tests/engines/ray_head_checks.py", "-q -s")


def test_head_loss_message_names_restarts_it_cannot_do(tmp_path):
    from singa_builtins.engines.ray.headwatch import HeadWatch, head_lost_message

    text = head_lost_message("10.0.0.1:6379", 7.2, tmp_path, private=False, restarts=2)
    assert "lost the head node (its GCS at 10.0.0.1:6379): no connection for 7 s" in text
    assert "--max-restarts 2 cannot survive the head's loss" in text
    assert "no checkpoint was written" in text and "restart the head" in text
    text = head_lost_message("10.0.0.1:6379", 7.2, tmp_path, private=False, restarts=0,
                             doing="while the job trained")  # fmt: skip
    assert "(its GCS at 10.0.0.1:6379) while the job trained: no connection for 7 s" in text
    now = [0.0]
    watch = HeadWatch("127.0.0.1:1", clock=lambda: now[0], grace=6.0)  # nothing on port 1
    assert not watch.lost()
    now[0] = 7.0
    assert watch.lost() and watch.lost_for() >= 7.0
