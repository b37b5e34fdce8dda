"""Room in /dev/shm: the shm and ray engines say, before touching a segment, when the
machine (or a Ray node) has less shared memory than the job needs there. A page that
cannot be had is a SIGBUS killing whichever process touches it (Docker's default /dev/shm
is 64 MB), so the check is what turns that into an error a user can act on."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from singa_builtins.engines.ray.segments import touched_bytes
from singa_builtins.engines.shm.layout import ParamInfo, ParamLayout
from singa_builtins.engines.shm.segments import check_room
from singa_builtins.engines.shm.topology import build_topology

from singa_core.errors import SingaError
from singa_core.schema import job_pb2
from tests.conftest import REPO, mlp_conf, write_csv_blobs


def test_check_room_says_how_much_is_needed_and_how_to_make_room():
    check_room(10 << 20, 10 << 20, "this machine")  # exactly enough
    check_room(10 << 20, None, "this machine")  # no /dev/shm to ask: nothing to say
    with pytest.raises(SingaError) as info:
        check_room(300 << 20, 64 << 20, "node 10.0.0.2")
    err = info.value
    assert err.where == "/dev/shm"
    assert err.message == (
        "the job needs 300 MiB of shared memory on node 10.0.0.2; /dev/shm has 64 MiB free there"
    )
    assert "--shm-size" in err.help and "medium: Memory" in err.help


def _three_workers_one_server():
    cluster = job_pb2.ClusterProto(
        nworkers_per_group=3, nservers_per_group=1, server_worker_separate=True
    )
    topo = build_topology(cluster)
    info = ParamInfo(0, "w", (1000,), 0, 1000, True, 1.0, 1.0, 3)
    return topo, ParamLayout([info], 1, 1)


def test_touched_bytes_per_node_follow_the_placement():
    topo, layout = _three_workers_one_server()
    assert [(p.workers, p.servers) for p in topo.procs] == [
        (((0, 0),), ()), (((0, 1),), ()), (((0, 2),), ()), ((), ((0, 0),)),
    ]  # fmt: skip
    value = 4 * 1000
    # workers 0 and 2 on A (A is their group's gateway: both gradient segments, the
    # mirror); worker 1 beside the server on B (its gradient segment, the server's values)
    assert touched_bytes(topo, layout, ["A", "B", "A", "B"]) == {"A": 3 * value, "B": 2 * value}
    # everything on one node: the server's values and 3 gradient segments, no mirror in use
    assert touched_bytes(topo, layout, ["A"] * 4) == {"A": 4 * value}
    # worker 0 alone on A sends by Ray (nothing of A is touched); workers 1 and 2 beside
    # the server on B: their gradient segments and the server's values, no mirror in use
    assert touched_bytes(topo, layout, ["A", "B", "B", "B"]) == {"B": 3 * value}


def test_touched_bytes_count_the_sync_segments_of_same_node_hogwild():
    """2 groups with a server group each (worker+server processes): a slice whose master
    copy is the other server group's is synced through the sync segment when that group's
    process is on the same node, by Ray otherwise."""
    cluster = job_pb2.ClusterProto(nworker_groups=2, nserver_groups=2)
    topo = build_topology(cluster)
    info = ParamInfo(0, "w", (1000,), 0, 1000, True, 1.0, 1.0, 1)
    layout = ParamLayout([info], 1, 2)
    assert sorted((s.size, s.master) for s in layout.slices) == [(500, 0), (500, 1)]
    value = 4 * 1000
    # per process: its server group's values and its worker's gradients (all on its node),
    # and on one node the half of the values whose master is the other group
    assert touched_bytes(topo, layout, ["A", "A"]) == {"A": 4 * value + value}
    assert touched_bytes(topo, layout, ["A", "B"]) == {"A": 2 * value, "B": 2 * value}


def _can_mount_tmpfs() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    res = subprocess.run(
        ["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /dev/shm"],
        capture_output=True,
    )
    return res.returncode == 0


@pytest.mark.skipif(not _can_mount_tmpfs(), reason="needs root and unshare -m (mount namespaces)")
def test_shm_engine_refuses_a_dev_shm_without_room(tmp_path):
    """A private mount namespace with a 1 MB /dev/shm (a small Docker /dev/shm in
    miniature) and a job of 2 MB of parameters: exit 2 before any segment is made, no
    traceback, nothing left in /dev/shm."""
    data = tmp_path / "blobs.csv"
    write_csv_blobs(data)
    conf = tmp_path / "job.conf"
    conf.write_text(mlp_conf(data, tmp_path / "ws", steps=5, hidden=65536))
    cmd = (
        "mount -t tmpfs -o size=1m tmpfs /dev/shm && "
        f"{sys.executable} -m singa_core.commands.cli train {conf} --engine shm -q "
        "-o cluster.server_worker_separate=true; code=$?; ls -A /dev/shm; exit $code"
    )
    res = subprocess.run(
        ["unshare", "-m", "sh", "-c", cmd], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert res.returncode == 2, res.stderr
    expected = (
        "/dev/shm: error: the job needs 6 MiB of shared memory on this machine; "
        "/dev/shm has 1 MiB free there"
    )
    assert expected in res.stderr, res.stderr
    assert "help: give /dev/shm more room" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    assert res.stdout == "", res.stdout  # ls: nothing left in /dev/shm
