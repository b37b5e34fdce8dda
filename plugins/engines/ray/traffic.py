"""Bytes between nodes: what a placement is expected to move, and what the run moved.

The model (:func:`expected`), for processes placed as ``node_of`` says (process index ->
node id), per step (every worker group one step):

* parameters: each worker group sends, for each slice of its server group, one gradient
  from every node holding workers of the group to the slice's server node, and receives
  the new value back (the workers of a group on one node go through their gateway: one
  copy each way per node; see :mod:`~singa_builtins.engines.ray.gateway`), so
  2 x 4 bytes x slice size per (node, slice) pair on different nodes. For a group whose
  partitions own different Params this is an upper bound;
* syncs (several server groups, distributed Hogwild): a server group sends the delta of a
  slice to the slice's master copy every ``sync_freq`` of its updates and takes the master's
  value back, 2 x 4 bytes x slice size when the master is on another node;
* checkpoints (per checkpoint, not per step): the values and updater state of server group
  0 go from their servers' nodes to the driver's node, which writes them;
* bridges: a group whose partitions are on several nodes also sends activations and their
  gradients between them (not counted; named).

:func:`note` turns the counts the actors kept into the closing ``ray:`` line.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MB = 1e6


def mb(nbytes: float) -> str:
    """Megabytes with three significant digits (one decimal from 100 MB)."""
    v = nbytes / MB
    return f"{v:.1f}" if v >= 100 else f"{v:.3g}"


@dataclass
class Expected:
    params: float = 0.0  # bytes per step: gradients and values
    syncs: float = 0.0  # bytes per step: inter-group syncs
    checkpoint: float = 0.0  # bytes per checkpoint to the driver's node
    split_groups: list[int] = field(default_factory=list)  # partitions on several nodes

    @property
    def per_step(self) -> float:
        return self.params + self.syncs


def expected(topo, layout, node_of: list[str], nstate: int, driver: str | None = None):
    """The :class:`Expected` bytes of the placement ``node_of``."""
    out = Expected()
    server_node = {s: node_of[ps.index] for ps in topo.procs for s in ps.servers}
    learnable = [s for s in layout.slices if layout.params[s.param].num_total]
    learnable_ids = {s.id for s in learnable}
    group_nodes: dict[int, set[str]] = {}
    for ps in topo.procs:
        for g, _ in ps.workers:
            group_nodes.setdefault(g, set()).add(node_of[ps.index])
    for g in sorted(group_nodes):
        sg = topo.server_group_of(g)
        for s in learnable:
            remote = group_nodes[g] - {server_node[(sg, s.server)]}
            out.params += 2 * 4 * s.size * len(remote)
        if len(group_nodes[g]) > 1 and topo.nworkers_per_group > 1:
            out.split_groups.append(g)
    if topo.nserver_groups > 1:
        groups_of = [
            sum(topo.server_group_of(g) == sg for g in range(topo.nworker_groups))
            for sg in range(topo.nserver_groups)
        ]
        for sg in range(topo.nserver_groups):
            for s in learnable:
                if s.master == sg:
                    continue
                if server_node[(s.master, s.server)] != server_node[(sg, s.server)]:
                    out.syncs += 2 * 4 * s.size * groups_of[sg] / max(1, topo.sync_freq)
    if driver is not None:
        out.checkpoint = sum(
            4 * s.size * (1 + (nstate if s.id in learnable_ids else 0))
            for s in layout.slices
            if server_node[(0, s.server)] != driver
        )
    return out


def describe(exp: Expected) -> str:
    """E.g. "95.8 MB per step (gradients and values 95.8, syncs 0)"."""
    text = (
        f"{mb(exp.per_step)} MB per step (gradients and values {mb(exp.params)}, "
        f"syncs {mb(exp.syncs)})"
    )
    if exp.split_groups:
        text += " + bridge activations of group(s) " + ",".join(map(str, exp.split_groups))
    return text


def note(totals: dict, steps: int, exp: Expected | None) -> str | None:
    """The closing line of what crossed between nodes (None when nothing did)."""
    grads, values = totals.get("grad_bytes", 0), totals.get("value_bytes", 0)
    syncs = totals.get("sync_bytes", 0)
    total = grads + values + syncs
    if not total and not (exp and exp.per_step):
        return None
    per = f"{mb(total / max(1, steps))} MB per step over {steps} step(s)"
    text = (
        f"ray: parameters between nodes: {mb(grads)} MB of gradients, {mb(values)} "
        f"MB of values, {mb(syncs)} MB of syncs ({per}; "
        f"{totals.get('value_copies', 0)} value copies for {totals.get('value_answers', 0)} "
        "answers)"
    )
    if exp is not None:
        text += f"; the placement's model: {mb(exp.per_step)} MB per step"
    return text
