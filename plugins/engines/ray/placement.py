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

A process whose workers compute on a GPU asks for one GPU per distinct device of its
workers (``num_gpus`` in its bundle and actor), so it goes to a node with that many free
GPUs; the other processes go anywhere, nodes without GPUs first when the job uses GPUs
(``group`` then places a group's GPU processes and its other processes, CPU workers and
servers, apart: the GPU ones on GPU nodes, the others on nodes without GPUs when those
have room).

Plans are made on what is **free** now on each node (the totals less what other jobs'
actors and placement groups hold), so a job that fits beside them is placed there. A job
that needs more CPUs or GPUs than the cluster has, or than it has free, or a process bigger
than every node's free room, is an error before any actor starts, naming each node's free
CPUs, memory and GPUs.
"""

from __future__ import annotations

import os
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
    gpus: float = 0.0  # one per distinct GPU device of its workers

    def bundle(self) -> dict[str, float]:
        out: dict[str, float] = {}
        if self.cpus:
            out["CPU"] = self.cpus
        if self.memory:
            out["memory"] = float(self.memory)
        if self.gpus:
            out["GPU"] = self.gpus
        return out


STANDIN_GPU_ENV = "SINGA_RAY_STANDIN_GPU"


def is_gpu_spec(spec: str) -> bool:
    """Whether a worker on device ``spec`` needs a GPU of its node: ``cuda:N``; and the
    stand-in device when ``SINGA_RAY_STANDIN_GPU=1`` (the test hook: on a cluster whose
    nodes declare GPUs they do not have, ``ray start --num-gpus 1``, the stand-in stands for
    the GPU Ray gives the worker)."""
    spec = str(spec)
    if spec.startswith(("cuda", "gpu")):
        return True
    return spec == "standin" and os.environ.get(STANDIN_GPU_ENV) == "1"


def gpu_devices_of(spec_proc, device_specs) -> list[str]:
    """The distinct GPU device specs the workers of one process run on, in order."""
    out: list[str] = []
    for _, j in spec_proc.workers:
        spec = device_specs[j] if j < len(device_specs) else "cpu"
        if is_gpu_spec(spec) and spec not in out:
            out.append(spec)
    return out


def process_requests(
    topology, layout, nstate: int, cpus_per_worker: float, device_specs=()
) -> list:
    """One :class:`ProcessRequest` per SINGA process; ``device_specs``: the device of each
    worker of a group (worker j on ``device_specs[j]``, the CPU beyond the list)."""
    per_server = {}
    for sj in range(topology.nservers_per_group):
        values = sum(s.size for s in layout.slices_of_server(sj))
        # values, updater state, aggregation buffer, last sync (Hogwild), a reply in flight
        per_server[sj] = max(MIN_SERVER_MEMORY, 4 * values * (4 + nstate))
    out = []
    for spec in topology.procs:
        memory = sum(per_server[j] for _, j in spec.servers)
        gpus = float(len(gpu_devices_of(spec, list(device_specs))))
        out.append(ProcessRequest(spec.index, len(spec.workers) * cpus_per_worker, memory, gpus))
    return out


def nodes_free_text(nodes) -> str:
    """Each node's free CPUs, memory and GPUs, for an error."""
    return "; ".join(f"{n.label()}: {n.free_text()}" for n in nodes)


def check_fits(requests, nodes, cpus_per_worker: float, locate, gpu_where=None) -> None:
    """A located error, before anything waits, when the job cannot fit the cluster: more
    CPUs or GPUs than it has in all or free, or a process bigger than every node.
    ``gpu_where``: where the job asks for GPUs (job.conf's ``gpu`` or ``--device``)."""
    need = sum(r.cpus for r in requests)
    have = sum(n.cpus for n in nodes)
    free = sum(n.avail_cpus for n in nodes)
    threads = sum(1 for r in requests if r.cpus)
    each = f"; per node: {nodes_free_text(nodes)}"
    help_text = (
        "add nodes to the cluster (`ray start --address HEAD:PORT` on another machine), "
        "use fewer workers, or let a worker thread ask for less than a CPU: "
        "--engine-option cpus_per_worker=0.5"
    )
    asks = (
        f"the cluster section needs {need:g} CPUs ({threads} process(es) with workers, "
        f"{cpus_per_worker:g} CPU per worker thread)"
    )
    if need > have + EPS:
        raise SingaError(
            f"{asks} but the Ray cluster has {have:g} on {len(nodes)} node(s){each}",
            where=locate("cluster"),
            help=help_text,
        )
    if need > free + EPS:
        raise SingaError(
            f"{asks} but only {free:g} of the Ray cluster's {have:g} are free (other jobs hold "
            f"the rest){each}",
            where=locate("cluster"),
            help="wait for other jobs to end, or " + help_text,
        )
    gpus = sum(r.gpus for r in requests)
    if gpus:
        where = gpu_where or locate("gpu")
        total = sum(n.gpus for n in nodes)
        free_gpus = sum(n.avail_gpus for n in nodes)
        if gpus > free_gpus + EPS:
            held = f" ({total:g} in all, others held by other jobs)" if total > free_gpus else ""
            raise SingaError(
                f"the job's workers ask for {gpus:g} GPUs but the Ray cluster has "
                f"{free_gpus:g} free{held}{each}",
                where=where,
                help="start nodes with GPUs (`ray start --num-gpus N` declares them), put "
                "fewer workers on GPUs, or run them on the CPU (--device cpu)",
            )
        big = max(requests, key=lambda r: r.gpus)
        most = max((n.avail_gpus for n in nodes), default=0.0)
        if big.gpus > most + EPS:
            raise SingaError(
                f"SINGA process {big.index} runs workers on {big.gpus:g} GPUs but no node has "
                f"more than {most:g} free{each}",
                where=locate("cluster.nworkers_per_procs"),
                help="put fewer GPU workers in a process (nworkers_per_procs)",
            )
    biggest = max(requests, key=lambda r: r.cpus)
    largest = max((n.cpus for n in nodes), default=0.0)
    if biggest.cpus > largest + EPS:
        raise SingaError(
            f"SINGA process {biggest.index} needs {biggest.cpus:g} CPUs on one node but the "
            f"largest node has {largest:g}",
            where=locate("cluster.nworkers_per_procs"),
            help="put fewer workers in a process (nworkers_per_procs) or " + help_text[4:],
        )
    roomiest = max((n.avail_cpus for n in nodes), default=0.0)
    if biggest.cpus > roomiest + EPS:
        raise SingaError(
            f"SINGA process {biggest.index} needs {biggest.cpus:g} CPUs on one node but no "
            f"node has more than {roomiest:g} free{each}",
            where=locate("cluster.nworkers_per_procs"),
            help="wait for other jobs to end, or put fewer workers in a process "
            "(nworkers_per_procs)",
        )


class _Room:
    """What is left of each node while a plan is made (from what is free now)."""

    def __init__(self, nodes) -> None:
        self.nodes = list(nodes)
        self.cpus = {n.id: n.avail_cpus for n in nodes}
        self.memory = {n.id: n.avail_memory for n in nodes}
        self.gpus = {n.id: n.avail_gpus for n in nodes}
        self.count = dict.fromkeys(self.cpus, 0)

    def fits(self, node: str, cpus: float, memory: int, gpus: float = 0.0) -> bool:
        return (
            self.cpus[node] + EPS >= cpus
            and self.memory[node] + EPS >= memory
            and self.gpus[node] + EPS >= gpus
        )

    def take(self, node: str, cpus: float, memory: int, gpus: float = 0.0) -> None:
        self.cpus[node] -= cpus
        self.memory[node] -= memory
        self.gpus[node] -= gpus
        self.count[node] += 1

    def text(self) -> str:
        return "; ".join(
            f"{n.label()}: {self.cpus[n.id]:g} CPUs, {self.memory[n.id] / 2**30:.1f} GiB "
            f"memory, {self.gpus[n.id]:g} GPUs left"
            for n in self.nodes
        )


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
    for node in ([prefer] if prefer else []) + _for(room, order, req.gpus):
        if room.fits(node, req.cpus, req.memory, req.gpus):
            room.take(node, req.cpus, req.memory, req.gpus)
            return node
    gpus = f", GPU {req.gpus:g}" if req.gpus else ""
    raise SingaError(
        f"SINGA process {req.index} (CPU {req.cpus:g}, memory {req.memory / 2**20:.0f} MiB"
        f"{gpus}) fits on no node beside the processes placed before it; free per node "
        f"after them: {room.text()}",
        help="add nodes or memory, use fewer workers, or let a worker thread ask for less "
        "than a CPU: --engine-option cpus_per_worker=0.5",
    )


def _for(room: _Room, order: list[str], gpus: float) -> list[str]:
    """``order`` for a request: one without GPUs tries the nodes without GPUs first (when
    any node has one), keeping the GPU nodes' CPUs for the GPU workers."""
    if gpus or not any(room.gpus.values()):
        return order
    return sorted(order, key=lambda n: room.gpus[n] > EPS)  # stable


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
    has_gpu = {n.id: n.gpus > EPS for n in nodes}
    groups = _units(topo)
    if any(r.gpus for r in requests) and not all(has_gpu.values()):
        # a hybrid job on a cluster with nodes without GPUs: a unit's GPU processes and its
        # other processes (CPU workers, servers) are placed apart, the others on nodes
        # without GPUs first (the GPU nodes' CPUs stay for GPU workers)
        groups = [part for members in groups
                  for part in ([i for i in members if requests[i].gpus],
                               [i for i in members if not requests[i].gpus]) if part]  # fmt: skip
    for k, members in enumerate(groups):
        reqs = [requests[i] for i in members]
        cpus, memory = sum(r.cpus for r in reqs), sum(r.memory for r in reqs)
        gpus = sum(r.gpus for r in reqs)
        fitting = [n for n in _for(room, ordered, gpus) if room.fits(n, cpus, memory, gpus)]
        if fitting:  # the whole unit on the node with the fewest units, then most room; the
            # first (server group 0's, whose values a checkpoint writes) on the driver's node;
            # a unit without GPUs on a node without GPUs first
            def rank(n: str, gpus: float = gpus) -> tuple:
                return (not gpus and has_gpu[n], units[n], -room.cpus[n])

            node = min(fitting, key=rank)
            if k == 0 and ordered[0] in fitting and rank(ordered[0])[0] == rank(node)[0]:
                node = ordered[0]
            for r in reqs:
                room.take(node, r.cpus, r.memory, r.gpus)
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
