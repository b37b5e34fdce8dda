"""Shared memory between the actors of one node (the Ray engine's same-node fast path).

Ray's object store costs a copy in and page faults per object (on these machines about
0.6 GB/s for a 48 MB gradient through an actor call), while the shm engine moves the same
bytes at memcpy speed. So actors on one node share Param values and gradients the way the
shm engine's processes do, and Ray carries only the small messages:

* a process with servers keeps, per server group it serves, the values of its slices in a
  segment ``v<sg>`` laid out like the whole server group (float32, ``layout.total``; only the
  pages of its own slices are ever touched, so the rest costs no memory): its servers update
  them in place, and the workers of its node read them there;
* a process with workers keeps, per worker, a gradient segment ``g<worker index>`` of the same
  layout: the worker copies a gradient slice there and tells the slice's server (on the same
  node) which slice is ready; the server sums from, and may scribble on, that buffer.

A process that is its node's gateway of a worker group (see
:mod:`~singa_builtins.engines.ray.gateway`) also keeps the values it receives for the group
in a segment ``m<group>`` (every process with workers makes one per group; only a gateway's
is touched).

With several server groups (distributed Hogwild) a process with servers keeps, per server
group it serves, a sync segment ``y<sg>``: the delta of a slice for its master copy goes
there and the master's value comes back there when the master is on the same node.

Segments are sparse until touched; :func:`touched_bytes` says how much of each node's
``/dev/shm`` training will touch, which the driver checks against the room there before
anything is written.

Every segment is created by its owner when the actor starts and attached by the other
actors of the same node (the same Ray node id: two Ray nodes on one machine do not share);
then the driver has each owner unlink its names, so nothing stays in ``/dev/shm`` whatever
happens later: the memory goes when the last process mapping it exits, killed or not. A
process killed before the unlink leaves its names to its multiprocessing resource tracker,
which removes them. A process whose head is lost (the driver gone with it) removes its
own names and ends itself (``SingaProcess._guard_head``; a name still being created as it
ends is its resource tracker's). Two more nets catch what those miss (a whole machine
halted, a tracker killed with its actor): every name says its node, owner pid and the attempt
(``singa-ray-<node>-<pid>-<attempt>-p<process>-<key>``); when an attempt ends the driver
removes the attempt's names on every node it can still reach (:func:`unlink_attempt`, a
small task per node), and every later attempt first removes, on each node, the names whose
owner process no longer exists there (:func:`unlink_dead`), as the in-process engine
removes the temp files of dead runs.
"""

from __future__ import annotations

import os
import secrets
from collections import defaultdict
from multiprocessing import resource_tracker, shared_memory

import numpy as np
from singa_builtins.engines.ray.gateway import gateway_processes
from singa_builtins.engines.shm.segments import check_room

PREFIX = "singa-ray-"
SHM_DIR = "/dev/shm"


def segment_prefix(node_id: str, pid: int, attempt: str, index: int) -> str:
    return f"{PREFIX}{node_id[:12]}-{pid}-{attempt}-p{index}-"


def _names(shm_dir: str = SHM_DIR) -> list[str]:
    try:
        return [n for n in os.listdir(shm_dir) if n.startswith(PREFIX)]
    except OSError:  # no /dev/shm here (not Linux)
        return []


def _parts(name: str) -> tuple[str, int, str] | None:
    """(node, pid, attempt) of a segment name, None for a name of another form."""
    fields = name[len(PREFIX) :].split("-")
    if len(fields) < 5 or not fields[1].isdigit():
        return None
    return fields[0], int(fields[1]), fields[2]


def _unlink(names, shm_dir: str) -> int:
    removed = 0
    for name in names:
        try:
            os.unlink(os.path.join(shm_dir, name))
            removed += 1
        except OSError:
            pass
    return removed


def unlink_attempt(attempt: str, shm_dir: str = SHM_DIR) -> int:
    """Run on a node: remove the segments of ``attempt`` there; how many."""
    return _unlink([n for n in _names(shm_dir) if (p := _parts(n)) and p[2] == attempt], shm_dir)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def unlink_dead(node_id: str, shm_dir: str = SHM_DIR) -> int:
    """Run on a node: remove the segments this node's processes made that outlived their
    owner (its pid is gone here); how many. Names of other nodes (two Ray nodes sharing a
    /dev/shm) are left alone."""
    return _unlink(
        [
            n
            for n in _names(shm_dir)
            if (p := _parts(n)) and p[0] == node_id[:12] and not _alive(p[1])
        ],
        shm_dir,
    )


class NodeSegments:
    """The segments one actor created (by key) and the ones it attached (by name)."""

    def __init__(self, index: int, node_id: str = "local", attempt: str = "") -> None:
        attempt = attempt or secrets.token_hex(4)
        self.prefix = segment_prefix(node_id, os.getpid(), attempt, index)
        self.created: dict[str, shared_memory.SharedMemory] = {}
        self.attached: dict[str, shared_memory.SharedMemory] = {}
        self.arrays: dict[str, np.ndarray] = {}

    def create(self, key: str, count: int) -> np.ndarray:
        """A new zero-filled float32 segment of ``count`` values, kept under ``key``."""
        shm = shared_memory.SharedMemory(
            name=self.prefix + key, create=True, size=max(4, 4 * int(count))
        )
        self.created[key] = shm
        arr = np.ndarray((int(count),), dtype=np.float32, buffer=shm.buf)
        self.arrays[key] = arr
        return arr

    def names(self) -> dict[str, str]:
        """key -> name of every created segment (for the other actors of the node)."""
        return {key: shm.name for key, shm in self.created.items()}

    def attach(self, name: str, count: int) -> np.ndarray:
        """Another actor's segment, as a float32 array of ``count`` values."""
        shm = self.attached.get(name)
        if shm is None:
            shm = shared_memory.SharedMemory(name=name)
            # Python < 3.13 registers an attached segment with this process's resource
            # tracker, which would unlink it (the owner's!) when this process exits
            resource_tracker.unregister(shm._name, "shared_memory")  # noqa: SLF001
            self.attached[name] = shm
        return np.ndarray((int(count),), dtype=np.float32, buffer=shm.buf)

    def unlink(self) -> int:
        """Remove the names of the created segments (the mappings stay valid); how many
        were still there. Another thread may call it while segments are being created."""
        removed = 0
        for shm in list(self.created.values()):
            try:
                shm.unlink()
                removed += 1
            except FileNotFoundError:
                pass
        return removed

    def close(self) -> None:
        self.arrays.clear()
        for shm in [*self.created.values(), *self.attached.values()]:
            try:
                shm.close()
            except BufferError:  # a view is still alive; the mapping goes with the process
                pass
        self.unlink()


def touched_bytes(topo, layout, node_of: list[str]) -> dict[str, int]:
    """Node id -> bytes of its segments that training touches, the processes placed as
    ``node_of`` (process index -> node id) says: the values of its servers' slices; in each
    worker's gradient segment the slices that go through shared memory (served on the node,
    or every slice when the node is the group's gateway: two or more of its workers there);
    in each gateway's mirror the slices served elsewhere. An upper bound: a partitioned
    worker touches only its own Params' slices."""
    server_proc = {s: ps.index for ps in topo.procs for s in ps.servers}
    gateways = gateway_processes(topo, node_of)
    need: dict[str, int] = defaultdict(int)
    for ps in topo.procs:
        node = node_of[ps.index]
        for _sg, j in ps.servers:
            need[node] += 4 * sum(s.size for s in layout.slices_of_server(j))
        for g, _ in ps.workers:
            sg = topo.server_group_of(g)
            through_gateway = (node, g) in gateways
            for s in layout.slices:
                if through_gateway or node_of[server_proc[(sg, s.server)]] == node:
                    need[node] += 4 * s.size
    if topo.nserver_groups > 1:  # sync segments: slices whose master is on the same node
        for ps in topo.procs:
            node = node_of[ps.index]
            for sg, j in ps.servers:
                need[node] += 4 * sum(
                    s.size
                    for s in layout.slices_of_server(j)
                    if s.master != sg and node_of[server_proc[(s.master, j)]] == node
                )
    for node, g in gateways:  # the gateway's mirror: the slices served elsewhere
        sg = topo.server_group_of(g)
        need[node] += 4 * sum(
            s.size for s in layout.slices if node_of[server_proc[(sg, s.server)]] != node
        )
    return dict(need)


def check_nodes_room(topo, layout, node_of: list[str], free: dict, labels: dict) -> dict:
    """Node id -> the bytes training touches there (:func:`touched_bytes`), after checking
    each against ``free[node]`` (its /dev/shm's free bytes, None: unknown); ``labels[node]``
    names the node in the error."""
    need = touched_bytes(topo, layout, node_of)
    for node, n in need.items():
        check_room(n, free[node], f"node {labels[node]}")
    return need
