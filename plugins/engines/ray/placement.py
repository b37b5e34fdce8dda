"""Which node runs which SINGA process (``--placement spread|pack``).

Every SINGA process (:class:`~singa_builtins.engines.shm.topology.ProcSpec`) is one actor in
one bundle of a placement group. A process's bundle asks for ``cpus_per_worker`` CPUs per
worker thread it runs (default 1: a worker computes all the time) and for the memory of its
servers' slices (values, updater state, aggregation and sync buffers). Servers ask for no
CPU: they sum and apply gradients between the workers' steps, so a server-only process
(``server_worker_separate``) fits beside the workers. ``spread`` (default) places a
process on every node before a second on any node (Ray's SPREAD strategy), ``pack`` fills
the nodes in order (PACK). A job that needs more CPUs than the cluster has, or a process
bigger than every node, is an error before any actor starts.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from singa_core.errors import SingaError

STRATEGIES = {"spread": "SPREAD", "pack": "PACK"}
READY_TIMEOUT = 60.0
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


def create_placement_group(requests, placement: str):
    """The job's placement group, ready (or a clean error after READY_TIMEOUT)."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    pg = placement_group([r.bundle() for r in requests], strategy=STRATEGIES[placement])
    ready, _ = ray.wait([pg.ready()], timeout=READY_TIMEOUT)
    if not ready:
        remove_placement_group(pg)
        raise SingaError(
            f"Ray could not place the job's {len(requests)} processes within "
            f"{READY_TIMEOUT:g} s (resources: {[r.bundle() for r in requests]})",
            help="check `ray status` for free CPUs and memory on the nodes",
        )
    return pg


def bundle_nodes(pg) -> dict[int, str]:
    """Bundle (= SINGA process) index -> Ray node id."""
    from ray.util.placement_group import placement_group_table

    deadline = time.monotonic() + 10
    while True:
        table = placement_group_table(pg).get("bundles_to_node_id", {})
        if table or time.monotonic() > deadline:
            return {int(k): v for k, v in table.items()}
        time.sleep(0.05)
