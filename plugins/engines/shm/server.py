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


class SliceServer:
    """One server's slices, whatever memory holds them (shared memory for ``shm``, the
    actor's own arrays for ``ray``): the per-group aggregation in front of the
    :class:`~singa_core.stub.ParamShard`, and the arithmetic of the inter-group sync.

    ``value_of(slice)`` gives the slice's value array (updated in place), ``state_of(slice)``
    its updater state arrays (or None: the shard makes its own), ``version_of(slice)`` its
    starting version.
    """

    def __init__(self, layout, topo, group: int, sid: int, updater, value_of, version_of,
                 state_of) -> None:  # fmt: skip
        self.layout, self.topo, self.group, self.sid = layout, topo, group, sid
        self.shard = ParamShard(updater)
        self.slices = layout.slices_of_server(sid)
        for s in self.slices:
            p = layout.params[s.param]
            self.shard.put(
                s.id,
                value_of(s),
                int(version_of(s)),
                lr_scale=p.lr_scale,
                wd_scale=p.wd_scale,
                num_total=1,  # groups are aggregated here, the shard applies each sum
                learnable=p.learnable,
            )
            state = state_of(s) if p.learnable else None
            if state is not None:
                self.shard.entries[s.id].state = state
        self.agg: dict[tuple[int, int], _Agg] = {}
        self.hogwild = topo.nserver_groups > 1
        self.local_updates: dict[int, int] = {}
        self.sync_pending: set[int] = set()
        self.last_sync = {
            s.id: self.value(s.id).copy() for s in self.slices if self.hogwild and s.master != group
        }

    def value(self, sid: int) -> np.ndarray:
        return self.shard.entries[sid].value

    def contribute(self, group, worker, sid, step, n, grad) -> tuple[int, list] | None:
        """``n`` summed gradients of worker group ``group`` for slice ``sid``. When the
        group's contributions reach the Param's ``num_total`` the sum is applied: returns
        (new version, the contributing (group, worker) pairs); else None. ``grad`` may be
        used as scratch space when writeable."""
        s = self.layout.slices[sid]
        p = self.layout.params[s.param]
        a = self.agg.get((group, sid))
        if a is None:
            a = self.agg[(group, sid)] = _Agg()
        if a.count == 0 and n >= p.num_total and grad.flags.writeable:
            total = grad  # one message carries everything: use the sender's buffer
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
            return None
        version = self.shard.update(sid, step, total)
        who = a.who
        a.count, a.who = 0, []
        return version, who

    # -- inter-server-group synchronisation (distributed Hogwild) --------------------------
    def sync_due(self, sid: int) -> bool:
        """After an update of ``sid``: True when this (non-master) server group should send
        its changes to the master now (every ``sync_freq`` updates, one sync at a time)."""
        if sid not in self.last_sync:
            return False
        n = self.local_updates.get(sid, 0) + 1
        self.local_updates[sid] = n
        if n < self.topo.sync_freq or sid in self.sync_pending:
            return False
        self.local_updates[sid] = 0
        return True

    def sync_delta(self, sid: int, out: np.ndarray) -> None:
        """Requester: the change since the last sync into ``out``; a sync is now pending."""
        cur = self.value(sid)
        np.subtract(cur, self.last_sync[sid], out=out)
        self.last_sync[sid][...] = cur
        self.sync_pending.add(sid)

    def merge_delta(self, sid: int, delta: np.ndarray, out: np.ndarray) -> None:
        """Master: add a requester's ``delta``; the master's value into ``out`` (``out``
        may be ``delta``)."""
        cur = self.value(sid)
        cur += delta
        out[...] = cur

    def take_master(self, sid: int, master: np.ndarray) -> None:
        """Requester: take the other groups' changes, ``cur += master - last_sync``."""
        cur, last = self.value(sid), self.last_sync[sid]
        cur += master
        cur -= last
        last[...] = cur
        self.sync_pending.discard(sid)


class ServerThread:
    def __init__(self, ctx: ProcessContext, group: int, sid: int) -> None:
        sh = ctx.shared
        self.ctx, self.group, self.sid = ctx, group, sid
        self.layout = sh.layout
        self.topo = sh.topology
        self.mailbox = Mailbox(sh.server_queues[(group, sid)], ctx)
        values = ctx.segs[f"v{group}"]
        self.versions = ctx.segs[f"n{group}"]
        state = ctx.segs[f"s{group}"]
        total = self.layout.total

        def state_of(s):  # updater history lives in shared memory (checkpoints read it)
            return {
                name: state[k * total + s.offset : k * total + s.offset + s.size]
                for k, name in enumerate(sh.state_names)
            }

        self.server = SliceServer(
            self.layout,
            self.topo,
            group,
            sid,
            ctx.prepared.make_updater(),
            lambda s: values[s.offset : s.offset + s.size],
            lambda s: self.versions[s.id],
            state_of,
        )

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

    def _y(self, group: int, sid: int) -> np.ndarray:
        s = self.layout.slices[sid]
        return self.ctx.segs[f"y{group}"][s.offset : s.offset + s.size]

    def _update(self, group, worker, pid, sid, step, n) -> None:
        s = self.layout.slices[sid]
        grad = self.ctx.segs[f"g{worker}"][s.offset : s.offset + s.size]
        done = self.server.contribute(group, worker, sid, step, n, grad)
        if done is None:
            return
        version, who = done
        self.versions[sid] = version
        reply = ("ver", pid, sid, version)
        wpg = self.topo.nworkers_per_group
        for g, w in who:
            self.ctx.shared.worker_queues[(g, w % wpg)].put(reply)
        if self.server.sync_due(sid):
            self.server.sync_delta(sid, self._y(self.group, sid))
            self.ctx.shared.server_queues[(s.master, s.server)].put(("syncreq", self.group, sid))

    def _sync_request(self, from_group, sid) -> None:
        buf = self._y(from_group, sid)
        self.server.merge_delta(sid, buf, buf)
        s = self.layout.slices[sid]
        self.ctx.shared.server_queues[(from_group, s.server)].put(("syncresp", sid))

    def _sync_response(self, sid) -> None:
        self.server.take_master(sid, self._y(self.group, sid))
