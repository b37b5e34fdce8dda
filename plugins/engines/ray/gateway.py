"""A node's gateway for a worker group: one copy of each slice per node and update.

When two or more workers of one group run on a node (threads of one process or processes of
their own), each of them would otherwise send its gradient of a slice whose server is on
another node, and receive the new value, on its own: k workers, k copies each way. As SINGA
0.3's stub summed the gradients of a process's workers before they left it, one process of
the node, the group's **gateway** (the lowest-numbered process of the node with a worker of
the group), does it for the whole node:

* before the start every worker of the group on the node registers, on the gateway's
  request pipe, each remotely served slice it contributes to and how many gradients it sums
  into each update (``REGISTER``); all registrations are in the pipe before the start gate
  opens, so the gateway knows how many contributions make the node's part of an update;
* in training a worker leaves its gradient slice in its gradient segment and writes a
  request; the gateway sums the node's gradients of the slice (in place when there is one)
  and, when the node's part is complete, queues it for the slice's server; it sends a
  server's queue (one :class:`~singa_builtins.engines.ray.channels.PushCall`) when it holds
  ``BATCH_BYTES`` or when a worker says ``FLUSH`` (it has pushed its whole step, or it is
  about to wait for an answer);
* the answer (one value per slice) goes into the gateway's mirror segment ``m<group>``,
  laid out like the server group's values; each registered worker gets ``(slice,
  version)`` on its reply pipe and copies the value from there, as from a server of its node.

The server sees one contribution of ``n`` summed gradients, as it does from a worker with
replicas; the sum of two gradients does not depend on their order, so with two workers per
node the parameters are bit for bit those of the shm engine. A worker sends its next
gradient of a slice only after it has copied the last value, so the mirror is never
overwritten while a worker still reads it.
"""

from __future__ import annotations

import asyncio
import traceback
from collections import defaultdict

import numpy as np
from singa_builtins.engines.ray.channels import BATCH_BYTES, REPLY, PushCall, send
from singa_builtins.engines.ray.faults import is_loss, summary


def gateway_processes(topo, node_of: list[str]) -> dict[tuple[str, int], int]:
    """(node id, group) -> the process that is the node's gateway of the worker group, for
    every group with two or more workers on a node and a server elsewhere (``node_of``:
    process index -> node)."""
    server_nodes: dict[int, set[str]] = defaultdict(set)  # server group -> its nodes
    hosts: dict[tuple[str, int], list[int]] = defaultdict(list)
    for ps in topo.procs:
        for sg, _ in ps.servers:
            server_nodes[sg].add(node_of[ps.index])
        for g, _ in ps.workers:
            hosts[(node_of[ps.index], g)].append(ps.index)
    return {
        (node, g): min(qs)
        for (node, g), qs in hosts.items()
        if len(qs) >= 2 and server_nodes[topo.server_group_of(g)] - {node}
    }


class NodeGateway:
    """The gateway side in one process, for every group it is the node's gateway of.
    ``proc`` is the :class:`~singa_builtins.engines.ray.process.SingaProcess` (its event loop
    runs every method here)."""

    def __init__(self, proc) -> None:
        self.proc = proc
        self.slices = proc.shared.layout.slices
        self.expected: dict[tuple[int, int], int] = defaultdict(int)  # (group, slice) -> n
        self.workers: dict[tuple[int, int], list[int]] = defaultdict(list)  # -> registered
        self.parts: dict[tuple[int, int], list[np.ndarray]] = defaultdict(list)
        self.counts: dict[tuple[int, int], int] = defaultdict(int)
        self.sums: dict[tuple[int, int], np.ndarray] = {}  # reused from update to update
        self.batches: dict[int, list] = defaultdict(list)  # server process -> queued items
        self.batch_bytes: dict[int, int] = defaultdict(int)

    def register(self, group: int, worker: int, sid: int, n: int) -> None:
        self.expected[(group, sid)] += n
        self.workers[(group, sid)].append(worker)

    def contribute(self, sg: int, j: int, group: int, worker: int, sid: int, step: int,
                   n: int) -> None:  # fmt: skip
        """Worker ``worker`` left ``n`` summed gradients of slice ``sid`` in its segment."""
        key = (group, sid)
        s = self.slices[sid]
        self.parts[key].append(self.proc.grad_views[worker][s.offset : s.offset + s.size])
        self.counts[key] += n
        if self.counts[key] < self.expected[key]:
            return
        parts = self.parts.pop(key)
        count = self.counts.pop(key)
        if len(parts) == 1:
            total = parts[0]  # the worker's segment: unchanged until it has the answer
        else:
            total = self.sums.get(key)
            if total is None:
                total = self.sums[key] = np.empty(s.size, dtype=np.float32)
            np.add(parts[0], parts[1], out=total)
            for part in parts[2:]:
                total += part
        q = self.proc.server_proc[(sg, j)]
        self.batches[q].append((sg, j, group, self.workers[key][0], sid, step, count, total))
        self.batch_bytes[q] += total.nbytes
        if self.batch_bytes[q] >= BATCH_BYTES:
            self.flush(q)

    def flush_all(self) -> None:
        for q in list(self.batches):
            self.flush(q)

    def flush(self, q: int) -> None:
        items = self.batches.pop(q, None)
        self.batch_bytes.pop(q, None)
        if items:
            call = PushCall(self.proc.peers[q], items)
            metas = [(group, sid) for _, _, group, _, sid, _, _, _ in items]
            self.proc.loop.create_task(self._answer(call, metas))

    async def _answer(self, call: PushCall, metas: list) -> None:
        proc = self.proc
        role = f"the gateway of {proc.spec.role()} {proc.index}"
        try:
            answers = call.answers(list(await asyncio.gather(*call.refs)))
            for (group, sid), (version, value) in zip(metas, answers, strict=True):
                s = self.slices[sid]
                proc.mirror(group)[s.offset : s.offset + s.size] = value
                workers = self.workers[(group, sid)]
                for w in workers:
                    send(proc.reply_fds[w], REPLY, sid, version)
                proc.count_traffic(value_answers=len(workers) - 1)
        except Exception as exc:  # noqa: BLE001 - reported to the driver
            if is_loss(exc):  # the server's process, its node or an object is gone
                proc.post(("lost", role, summary(exc)))
            elif not proc.ctx.aborting():
                proc.post(("error", role, traceback.format_exc()))
            proc.ctx.local_abort.set()
