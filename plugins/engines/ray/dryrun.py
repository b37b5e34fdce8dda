"""``singa train --dry-run --engine ray``: where every process would run, and whether the
data stores are on every node.

It joins (or starts) the runtime, checks that the processes fit, plans which node gets
which process (as the run will: :func:`~singa_builtins.engines.ray.placement.plan`), prints
the bytes that placement and the others would move between nodes per step and per
checkpoint (:mod:`~singa_builtins.engines.ray.traffic`), and runs small tasks on every node
that look for the job's store paths there (relative paths are taken from the folder
``singa`` runs in, as the actors do) and for the room in its ``/dev/shm``; every node
that gets GPU workers opens their GPUs there, as the run does before its actors
(:mod:`~singa_builtins.engines.ray.gpucheck`). It names each
node's gateways (see :mod:`~singa_builtins.engines.ray.gateway`) and the shared memory
training will touch there.
"""

from __future__ import annotations

import os
import time

from singa_builtins.engines.ray import traffic
from singa_builtins.engines.ray.gateway import gateway_processes
from singa_builtins.engines.ray.gpucheck import check_gpus
from singa_builtins.engines.ray.nodecheck import on_each_node
from singa_builtins.engines.ray.placement import (
    STRATEGIES,
    check_fits,
    plan,
)
from singa_builtins.engines.ray.runtime import Runtime
from singa_builtins.engines.ray.segments import check_nodes_room
from singa_builtins.engines.shm.segments import shm_free

from singa_core.errors import SingaError


def store_paths(job) -> list[tuple[str, str]]:
    """(job.conf field, path) of every layer's store/data path."""
    out = []
    for i, layer in enumerate(job.neuralnet.layer):
        for fd, conf in layer.ListFields():
            if not hasattr(conf, "ListFields"):  # a scalar or repeated field
                continue
            path = getattr(conf, "path", None)
            if isinstance(path, str) and path:
                out.append((f"neuralnet.layer[{i}].{fd.name}.path", path))
    return out


def missing_paths(cwd: str, paths: list[str]) -> list[str]:
    """Run on a node: the paths that do not exist there."""
    return [p for p in paths if not os.path.exists(os.path.join(cwd, p))]


def missing_on_nodes(nodes, cwd: str, paths: list[str]) -> dict[str, list[str]]:
    """Node id -> the paths missing there (a small task pinned to every node)."""
    import ray

    refs = on_each_node(nodes, missing_paths, lambda n: (cwd, paths))
    return {node.id: ray.get(ref) for ref, node in refs.items()}


def shm_free_on_nodes(nodes) -> dict[str, int | None]:
    """Node id -> free bytes in its /dev/shm (a small task pinned to every node)."""
    import ray

    refs = on_each_node(nodes, shm_free, lambda n: ())
    return {node.id: ray.get(ref) for ref, node in refs.items()}


def shared_memory_lines(topo, layout, nodes, node_of: list[str], free_on) -> list[str]:
    """The gateways of every node and the /dev/shm each node needs (an error when one has
    too little); ``free_on(nodes)`` gives each node's free room."""
    by_id = {n.id: n for n in nodes}
    lines = []
    for (node, g), q in sorted(gateway_processes(topo, node_of).items(), key=lambda x: x[1]):
        n = sum(1 for ps in topo.procs if node_of[ps.index] == node for h, _ in ps.workers
                if h == g)  # fmt: skip
        lines.append(
            f"  gateway: process {q} for the {n} workers of group {g} on node "
            f"{by_id[node].label()} (one summed gradient out and one value in per slice)"
        )
    placed = [by_id[n] for n in dict.fromkeys(node_of)]
    free = free_on(placed)
    need = check_nodes_room(topo, layout, node_of, free, {n.id: n.label() for n in placed})
    parts = []
    for node, n in need.items():
        room = "?" if free[node] is None else f"{free[node] / 2**20:.0f}"
        parts.append(f"{by_id[node].label()} {n / 2**20:.0f} of {room} MiB free")
    if parts:
        lines.append("  shared memory (/dev/shm) training touches: " + ", ".join(parts))
    return lines


def check_stores(fields, nodes, cwd: str, locate, missing_on) -> None:
    """A located error if a store path of ``fields`` is missing on one of ``nodes``."""
    by_id = {n.id: n for n in nodes}
    for node_id, missing in missing_on(nodes, cwd, [p for _, p in fields]).items():
        if missing:
            where = next(f for f, p in fields if p == missing[0])
            raise SingaError(
                f"store {missing[0]} does not exist on node {by_id[node_id].label()}",
                where=locate(where),
                help="every node reads its workers' stripes from the same path: copy the "
                "stores to every machine (or use a shared file system)",
            )


def network_lines(engine, nodes, node_of: list[str], driver: str) -> list[str]:
    """The bytes the chosen placement is expected to move between nodes per step and per
    checkpoint, and what the other placements would (:mod:`.traffic`)."""
    topo, layout, opts = engine.topology, engine.layout, engine.ray_options
    nstate = len(engine.state_names)
    requests = engine.requests()
    chosen = traffic.expected(topo, layout, node_of, nstate, driver)
    lines = [
        f"  between nodes ({opts.placement}): {traffic.describe(chosen)}; "
        f"{traffic.mb(chosen.checkpoint)} MB per checkpoint to this machine"
    ]
    others = []
    for name in STRATEGIES:
        if name == opts.placement:
            continue
        try:
            alt = plan(topo, requests, nodes, name, driver)
        except SingaError:
            others.append(f"{name}: does not fit")
            continue
        exp = traffic.expected(topo, layout, alt, nstate, driver)
        others.append(f"{name} {traffic.mb(exp.per_step)} MB per step")
    if others:
        lines.append("  other placements (--placement): " + ", ".join(others))
    return lines


def placement_lines(engine, cwd: str) -> list[str]:
    import ray

    opts = engine.ray_options
    with Runtime(opts.address, insecure=opts.insecure) as runtime:
        nodes = runtime.nodes()
        driver = ray.get_runtime_context().get_node_id()
        by_id = {n.id: n for n in nodes}
        lines = [
            f"  cluster: {runtime.describe()}, {len(nodes)} node(s): "
            + ", ".join(f"{n.label()} with {n.free_text()}" for n in nodes)
        ]
        requests = engine.requests()
        check_fits(
            requests, nodes, opts.cpus_per_worker, engine.prepared.cfg.locate, engine.gpu_where()
        )
        node_of = plan(engine.topology, requests, nodes, opts.placement, driver)
        for spec, req in zip(engine.topology.procs, requests, strict=True):
            node = by_id[node_of[req.index]]
            asks = ", ".join(
                f"memory {v / 2**20:.0f} MiB" if k == "memory" else f"{k} {v:g}"
                for k, v in req.bundle().items()
            )
            lines.append(f"  {spec.role()} -> node {node.label()} (asks {asks})")
        lines += check_gpus(engine, requests, node_of, nodes,
                            time.monotonic() + opts.startup_timeout)  # fmt: skip
        lines += network_lines(engine, nodes, node_of, driver)
        lines += shared_memory_lines(
            engine.topology, engine.layout, nodes, node_of, shm_free_on_nodes
        )
        fields = store_paths(engine.prepared.job)
        if fields:
            check_stores(fields, nodes, cwd, engine.prepared.cfg.locate, missing_on_nodes)
            lines.append(
                f"  stores found on all {len(nodes)} node(s): "
                + ", ".join(sorted({p for _, p in fields}))
            )
    return lines
