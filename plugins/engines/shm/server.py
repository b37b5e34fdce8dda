"""A server thread (SINGA 0.3 §5.5): owns its slices in its server group's memory.

Messages (tuples on its queue):

* ``("upd", group, worker, param, slice, step, n)``: ``n`` gradients of a worker group for a
  slice, already summed by the worker in its gradient segment ``g<worker>``. When a group's
  contributions reach the Param's ``num_total`` the sum goes to the
  :class:`~singa_core.stub.ParamShard` (updater, version; the contributions are summed:
  the loss layers of batch replicas already scale by 1/n),
  the version is published in ``n<sg>`` and each contributing worker gets
  ``("ver", param, slice, version)``. Groups are aggregated separately: asynchronous across
  worker groups, synchronous within one.
* ``("syncreq", from_group, slice)`` (master side of the inter-group sync): add the delta
  the requester left in its ``y<from_group>`` buffer, leave the current value there, reply
  ``("syncresp", slice)``; the requester then takes the others' changes:
  ``cur += master - last_sync``.
* ``("stop",)``: the job is over.
"""

from __future__ import annotations

import numpy as np
from singa_builtins.engines.shm.context import Mailbox, ProcessContext

from singa_core.stub import ParamShard


class _Agg:
    __slots__ = ("count", "buf", "who", "step")

    def __init__(self) -> None:
        self.count = 0
        self.buf: np.ndarray | None = None
        self.who: list[tuple[int, int]] = []
        self.step = 0


class ServerThread:
    def __init__(self, ctx: ProcessContext, group: int, sid: int) -> None:
        sh = ctx.shared
        self.ctx, self.group, self.sid = ctx, group, sid
        self.layout = sh.layout
        self.topo = sh.topology
        self.mailbox = Mailbox(sh.server_queues[(group, sid)], ctx)
        self.values = ctx.segs[f"v{group}"]
        self.versions = ctx.segs[f"n{group}"]
        state = ctx.segs[f"s{group}"]
        total = self.layout.total
        self.shard = ParamShard(ctx.prepared.make_updater())
        self.slices = self.layout.slices_of_server(sid)
        for s in self.slices:
            p = self.layout.params[s.param]
            self.shard.put(
                s.id,
                self.values[s.offset : s.offset + s.size],
                int(self.versions[s.id]),
                lr_scale=p.lr_scale,
                wd_scale=p.wd_scale,
                num_total=1,  # groups are aggregated here, the shard applies each sum
                learnable=p.learnable,
            )
            if p.learnable:  # updater history lives in shared memory (checkpoints read it)
                entry = self.shard.entries[s.id]
                entry.state = {
                    name: state[k * total + s.offset : k * total + s.offset + s.size]
                    for k, name in enumerate(sh.state_names)
                }
        self.agg: dict[tuple[int, int], _Agg] = {}
        self.hogwild = self.topo.nserver_groups > 1
        self.local_updates: dict[int, int] = {}
        self.sync_pending: set[int] = set()
        self.last_sync = {
            s.id: self.values[s.offset : s.offset + s.size].copy()
            for s in self.slices
            if self.hogwild and s.master != group
        }

    def run(self) -> None:
        handlers = {
            "upd": self._update,
            "syncreq": self._sync_request,
            "syncresp": self._sync_response,
        }
        while True:
            msg = self.mailbox.get()
            if msg[0] == "stop":
                return
            handlers[msg[0]](*msg[1:])

    def _update(self, group, worker, pid, sid, step, n) -> None:
        s = self.layout.slices[sid]
        p = self.layout.params[pid]
        grad = self.ctx.segs[f"g{worker}"][s.offset : s.offset + s.size]
        a = self.agg.get((group, sid))
        if a is None:
            a = self.agg[(group, sid)] = _Agg()
        if a.count == 0 and n >= p.num_total:
            total = grad  # one message carries everything: use the worker's buffer
        else:
            if a.buf is None:
                a.buf = np.empty(s.size, dtype=np.float32)
            if a.count == 0:
                np.copyto(a.buf, grad)
            else:
                a.buf += grad
            total = a.buf
        a.count += n
        a.who.append((group, worker))
        a.step = step
        if a.count < p.num_total:
            return
        version = self.shard.update(sid, step, total)
        self.versions[sid] = version
        reply = ("ver", pid, sid, version)
        wpg = self.topo.nworkers_per_group
        for g, w in a.who:
            self.ctx.shared.worker_queues[(g, w % wpg)].put(reply)
        a.count, a.who = 0, []
        if sid in self.last_sync:
            self._maybe_sync(s)

    # -- inter-server-group synchronisation (distributed Hogwild) --------------------------
    def _maybe_sync(self, s) -> None:
        n = self.local_updates.get(s.id, 0) + 1
        self.local_updates[s.id] = n
        if n < self.topo.sync_freq or s.id in self.sync_pending:
            return
        self.local_updates[s.id] = 0
        cur = self.values[s.offset : s.offset + s.size]
        buf = self.ctx.segs[f"y{self.group}"][s.offset : s.offset + s.size]
        np.subtract(cur, self.last_sync[s.id], out=buf)
        self.last_sync[s.id][...] = cur
        self.sync_pending.add(s.id)
        self.ctx.shared.server_queues[(s.master, s.server)].put(("syncreq", self.group, s.id))

    def _sync_request(self, from_group, sid) -> None:
        s = self.layout.slices[sid]
        cur = self.values[s.offset : s.offset + s.size]
        buf = self.ctx.segs[f"y{from_group}"][s.offset : s.offset + s.size]
        cur += buf
        buf[...] = cur
        self.ctx.shared.server_queues[(from_group, s.server)].put(("syncresp", sid))

    def _sync_response(self, sid) -> None:
        s = self.layout.slices[sid]
        cur = self.values[s.offset : s.offset + s.size]
        master = self.ctx.segs[f"y{self.group}"][s.offset : s.offset + s.size]
        last = self.last_sync[sid]
        cur += master
        cur -= last
        last[...] = cur
        self.sync_pending.discard(sid)
