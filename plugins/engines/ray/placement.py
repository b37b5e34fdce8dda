"""Which node runs which SINGA process (``--placement group|spread|pack``).

Every SINGA process (:class:`~singa_builtins.engines.shm.topology.ProcSpec`) is one actor in
one bundle of a placement group. A process's bundle asks for ``cpus_per_worker`` CPUs per
worker thread it runs (default 1: a worker computes all the time) and for the memory of its
servers' slices (values, updater state, aggregation and sync buffers). Servers ask for no
CPU: they sum and apply gradients between the workers' steps, so a server-only process
(``server_worker_separate``) fits beside the workers.

singa decides the node of every process itself (:func:`plan`) and pins each bundle there
(Ray's ``ray.io/node-id`` bundle label), so that the dry-run's plan, its byte estimates
(:mod:`~singa_builtins.engines.ray.traffic`) and the run agree. The nodes are taken in
order: the node of the driver (the machine that runs ``singa train``, where checkpoints are
written) first, then by address.

* ``group`` (default): the processes of one worker group go to one node together with the
  server processes of its server group (those go with the lowest-numbered worker group
  that uses them), one such unit per node before a second on any (the unit holding server
  group 0 on the driver's node): only gradients and values of the *other* groups cross the
  network, once per node and slice. A unit bigger than every node is split over the nodes
  with the most room, its partitions in order (a bridge crosses once), its server-only
  processes on the node holding most of its workers.
* ``spread``: a process on every node before a second on any.
* ``pack``: fill the nodes in order.

A job that needs more CPUs than the cluster has, or a process bigger than every node, is an
error before any actor starts.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from singa_core.errors import SingaError

STRATEGIES = ("group", "spread", "pack")  # the first is the default
READY_TIMEOUT = 60.0
EPS = 1e-9
MIN_SERVER_MEMORY = 1 << 20


@dataclass(frozen=True)
class ProcessRequest:
    index: int
    cpus: float
    memory: int  # bytes; 0 for a process without servers

    def bundle(self) -> dict[str, float]:
        out: dict[str, float] = {}
        if self.cpus:
            out["CPU"] = self.cpus
        if self.memory:
            out["memory"] = float(self.memory)
        return out


def process_requests(topology, layout, nstate: int, cpus_per_worker: float) -> list:
    """One :class:`ProcessRequest` per SINGA process."""
    per_server = {}
    for sj in range(topology.nservers_per_group):
        values = sum(s.size for s in layout.slices_of_server(sj))
        # values, updater state, aggregation buffer, last sync (Hogwild), a reply in flight
        per_server[sj] = max(MIN_SERVER_MEMORY, 4 * values * (4 + nstate))
    out = []
    for spec in topology.procs:
        memory = sum(per_server[j] for _, j in spec.servers)
        out.append(ProcessRequest(spec.index, len(spec.workers) * cpus_per_worker, memory))
    return out


def check_fits(requests, nodes, cpus_per_worker: float, locate) -> None:
    need = sum(r.cpus for r in requests)
    have = sum(n.cpus for n in nodes)
    threads = sum(1 for r in requests if r.cpus)
    help_text = (
        "add nodes to the cluster (`ray start --address HEAD:PORT` on another machine), "
        "use fewer workers, or let a worker thread ask for less than a CPU: "
        "--engine-option cpus_per_worker=0.5"
    )
    if need > have + 1e-9:
        raise SingaError(
            f"the cluster section needs {need:g} CPUs ({threads} process(es) with workers, "
            f"{cpus_per_worker:g} CPU per worker thread) but the Ray cluster has {have:g} "
            f"on {len(nodes)} node(s)",
            where=locate("cluster"),
            help=help_text,
        )
    biggest = max(requests, key=lambda r: r.cpus)
    largest = max((n.cpus for n in nodes), default=0.0)
    if biggest.cpus > largest + 1e-9:
        raise SingaError(
            f"SINGA process {biggest.index} needs {biggest.cpus:g} CPUs on one node but the "
            f"largest node has {largest:g}",
            where=locate("cluster.nworkers_per_procs"),
            help="put fewer workers in a process (nworkers_per_procs) or " + help_text[4:],
        )


class _Room:
    """What is left of each node while a plan is made."""

    def __init__(self, nodes) -> None:
        self.nodes = list(nodes)
        self.cpus = {n.id: n.cpus for n in nodes}
        self.memory = {n.id: n.memory for n in nodes}
        self.count = dict.fromkeys(self.cpus, 0)

    def fits(self, node: str, cpus: float, memory: int) -> bool:
        return self.cpus[node] + EPS >= cpus and self.memory[node] + EPS >= memory

    def take(self, node: str, cpus: float, memory: int) -> None:
        self.cpus[node] -= cpus
        self.memory[node] -= memory
        self.count[node] += 1


def order_nodes(nodes, first: str | None = None) -> list:
    """The nodes in placement order: ``first`` (the driver's node), then by address."""
    return sorted(nodes, key=lambda n: (n.id != first, n.address, n.id))


def _units(topo) -> list[list[int]]:
    """The processes that ``group`` keeps on one node: per worker group its processes and
    the server-only processes of its server group (with the lowest-numbered group that uses
    the server group); processes sharing a group are one unit. In order of their lowest
    process index."""
    parent = list(range(len(topo.procs)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def join(a: int, b: int) -> None:
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)

    first_of_group: dict[int, int] = {}
    for ps in topo.procs:
        for g, _ in ps.workers:
            if g in first_of_group:
                join(first_of_group[g], ps.index)
            else:
                first_of_group[g] = ps.index
    home = {}  # server group -> a process of the lowest-numbered worker group using it
    for g in sorted(first_of_group):
        home.setdefault(topo.server_group_of(g), first_of_group[g])
    for ps in topo.procs:
        if ps.servers and not ps.workers:
            sg = ps.servers[0][0]
            if sg in home:
                join(home[sg], ps.index)
    units: dict[int, list[int]] = {}
    for ps in topo.procs:
        units.setdefault(root(ps.index), []).append(ps.index)
    return [units[k] for k in sorted(units)]


def _place_process(room: _Room, order: list[str], req, prefer=None) -> str:
    """A node for one process: ``prefer`` when it has room, else the first in ``order``."""
    for node in ([prefer] if prefer else []) + order:
        if room.fits(node, req.cpus, req.memory):
            room.take(node, req.cpus, req.memory)
            return node
    raise SingaError(
        f"SINGA process {req.index} (CPU {req.cpus:g}, memory {req.memory / 2**20:.0f} MiB) "
        "fits on no node beside the processes placed before it",
        help="add nodes or memory, use fewer workers, or let a worker thread ask for less "
        "than a CPU: --engine-option cpus_per_worker=0.5",
    )


def plan(topo, requests, nodes, strategy: str, first: str | None = None) -> list[str]:
    """Process index -> node id under ``strategy`` (see the module's text); ``first`` is the
    driver's node."""
    ordered = [n.id for n in order_nodes(nodes, first)]
    room = _Room(nodes)
    out: list[str] = [""] * len(requests)
    if strategy == "pack":
        for r in requests:
            out[r.index] = _place_process(room, ordered, r)
        return out
    if strategy == "spread":
        for r in requests:
            by_count = sorted(ordered, key=lambda n: room.count[n])  # stable: order breaks ties
            out[r.index] = _place_process(room, by_count, r)
        return out
    if strategy != "group":
        raise ValueError(strategy)
    units = dict.fromkeys(ordered, 0)  # node -> units placed there
    for k, members in enumerate(_units(topo)):
        reqs = [requests[i] for i in members]
        cpus, memory = sum(r.cpus for r in reqs), sum(r.memory for r in reqs)
        fitting = [n for n in ordered if room.fits(n, cpus, memory)]
        if fitting:  # the whole unit on the node with the fewest units, then most room; the
            # first (server group 0's, whose values a checkpoint writes) on the driver's node
            node = min(fitting, key=lambda n: (units[n], -room.cpus[n]))
            if k == 0 and ordered[0] in fitting:
                node = ordered[0]
            for r in reqs:
                room.take(node, r.cpus, r.memory)
                out[r.index] = node
            units[node] += 1
            continue
        # too big for any node: its worker processes in order over the roomiest nodes,
        # then its server-only processes beside most of its workers
        by_room = sorted(ordered, key=lambda n: -room.cpus[n])
        current = None
        for r in reqs:
            if r.cpus:
                current = out[r.index] = _place_process(room, by_room, r, prefer=current)
        placed = [out[r.index] for r in reqs if r.cpus]
        busiest = max(placed, key=placed.count) if placed else by_room[0]
        for r in reqs:
            if not r.cpus:
                out[r.index] = _place_process(room, by_room, r, prefer=busiest)
        for node in set(placed):
            units[node] += 1
    return out


def create_placement_group(requests, node_of: list[str], timeout: float = READY_TIMEOUT, tick=None):
    """The job's placement group, every bundle pinned to its node of ``node_of``, ready (or
    a clean error after ``timeout`` seconds); ``tick()`` is called every quarter second
    while Ray reserves (it may raise to give up: the group is removed)."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    pg = placement_group(
        [r.bundle() for r in requests],
        strategy="PACK",
        bundle_label_selector=[{"ray.io/node-id": node_of[r.index]} for r in requests],
    )
    deadline = time.monotonic() + timeout
    ready: list = []
    try:
        while not ready and time.monotonic() < deadline:
            ready, _ = ray.wait([pg.ready()], timeout=min(0.25, timeout))
            if not ready and tick is not None:
                tick()
    except BaseException:
        remove_placement_group(pg)
        raise
    if not ready:
        remove_placement_group(pg)
        raise SingaError(
            f"Ray could not reserve the job's {len(requests)} processes on their nodes within "
            f"{timeout:g} s (resources: {[r.bundle() for r in requests]})",
            help="another job may hold the CPUs or memory: check `ray status` for what is free "
            "on each node (or --startup-timeout SECONDS to wait longer)",
        )
    return pg
