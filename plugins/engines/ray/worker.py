"""A worker on Ray: the shm engine's WorkerThread (nets, TrainingLoop, checkpoints, stop
handling) with Ray for transport.

* :class:`RayStub`: ``update`` sends each slice of a Param's summed gradient to its server
  (on this node: shared memory and a pipe; on another: batched Ray calls), ``collect``
  waits for the answers and takes the fresh values;
* :class:`RayBridgeTransport`: bridge data and gradients of a partitioned group go to the
  peer worker's process (``deliver``) and are taken from this process's inbox;
* checkpoints: group 0 worker 0 hands the driver the training state of the step (its
  partitions' layer states included); the driver takes the values, versions and updater
  state of server group 0 from the servers themselves and writes the checkpoint (see
  :mod:`~singa_builtins.engines.ray.checkpoints`).
"""

from __future__ import annotations

import time
from collections import defaultdict

import numpy as np
from singa_builtins.engines.ray.channels import (
    BATCH_BYTES,
    FLUSH,
    REGISTER,
    REPLY,
    REQUEST,
    PushCall,
    send,
)
from singa_builtins.engines.shm.worker import ShmStub, WorkerThread
from singa_builtins.layers.bridge import BridgeTransport

from singa_core.device import copy_into, to_host
from singa_core.layer import kTrain
from singa_core.running import checkpoint as ckpt

GROUP_WAIT = 10.0  # seconds a checkpoint waits for the other partitions of group 0


class RayStub(ShmStub):
    """The ParamStub of a Ray worker (the bookkeeping of :class:`ShmStub`).

    A slice whose server is on this node (this process included) goes through the node's
    shared memory and pipes: the gradient into this worker's gradient segment, a request on
    the server's pipe, the version back on this worker's reply pipe, the value read in the
    server's value segment (or viewed there). A slice whose server is on another node goes
    the same way to the node's gateway of the group when the node has other workers of the
    group (see :mod:`~singa_builtins.engines.ray.gateway`; the value is then read in the
    gateway's mirror); otherwise with Ray: slices for one process are batched into one call
    (:class:`~singa_builtins.engines.ray.channels.PushCall`), sent when the batch holds
    ``BATCH_BYTES`` of gradients, when every Param of the step has been pushed, or before
    anything waits for an answer.
    """

    def __init__(self, rt, net) -> None:
        super().__init__(rt, net)
        proc, sg = rt.ctx.proc, rt.server_group
        self.proc = proc
        self.grads: dict[int, np.ndarray] = {}
        self.landing: dict[int, np.ndarray] = {}  # host buffers of Params on a GPU
        self.segment = proc.grad_buffer(rt.windex)
        self.reply_pipe = proc.replies[rt.windex]
        # per owner Param: how each of its slices reaches its server (see SingaProcess.route)
        self.routes = {
            oid: [proc.route(sg, self.layout.slices[sid].server, rt.group) for sid in sids]
            for oid, sids in self.layout.param_slices.items()
        }
        # per slice sent by pipe: where its new value is read
        self.sources = {
            sid: proc.mirror(rt.group)
            if route == "gateway"
            else proc.value_view(sg, self.layout.slices[sid].server)
            for oid, routes in self.routes.items()
            for sid, route in zip(self.layout.param_slices[oid], routes, strict=True)
            if route != "remote"
        }
        self.unflushed = False  # a request is with the gateway without a FLUSH after it
        self.waiting_node: dict[int, list[int]] = {}  # oid -> its slices sent by pipe
        self.versions: dict[int, int] = {}  # slice -> version replied on the pipe
        self.batches: dict[int, list] = defaultdict(list)  # process -> (oid, item) queued
        self.batch_bytes: dict[int, int] = defaultdict(int)
        self.remote: dict[int, list] = {}  # oid -> [(call, position, slice)]
        self.answers: dict = {}  # call -> its answers, until every oid has taken its own
        self.users: dict = defaultdict(int)  # call -> oids still to take their answers
        self.pushed: set[int] = set()  # oids pushed in this step
        self.step = -1

    def register(self) -> None:
        """Before the start gate: tell the gateway of this worker's group which slices it
        contributes to, and how many gradients it sums into each update."""
        rt = self.rt
        for oid, n in self.local.items():
            for sid, route in zip(self.layout.param_slices[oid], self.routes[oid], strict=True):
                if route == "gateway":
                    s = self.layout.slices[sid]
                    send(self.proc.gateway_fd(rt.group), REQUEST, rt.server_group, s.server,
                         rt.group, rt.windex, sid, -1, n, REGISTER)  # fmt: skip

    def update(self, step: int, param) -> None:
        oid = param.owner.id
        if self.counts[oid] == 0:
            self.collect(param)  # the previous update of this Param first
        routes = self.routes[oid]
        if any(r != "remote" for r in routes):  # summed in the node-shared gradient buffer
            info = self.layout.params[oid]
            buf = self.segment[info.offset : info.offset + info.size]
            if self.counts[oid] == 0:
                copy_into(buf, param.grad.reshape(-1))  # a device's gradient: to the host
            else:
                buf += to_host(param.grad).reshape(-1)
        elif self.local[oid] == 1 and isinstance(param.grad, np.ndarray):
            buf = np.ascontiguousarray(param.grad).reshape(-1)  # sent as it is (valid until
            # this Param's next backward)
        elif self.counts[oid] == 0:  # several local gradients: summed first
            buf = self.grads.get(oid)
            if buf is None:
                buf = self.grads[oid] = np.empty(param.grad.size, dtype=np.float32)
            copy_into(buf, param.grad.reshape(-1))
        else:
            buf = self.grads[oid]
            buf += to_host(param.grad).reshape(-1)
        self.counts[oid] += 1
        if self.counts[oid] < self.local[oid]:
            return
        self.counts[oid] = 0
        if step != self.step:
            self.step, self.pushed = step, set()
        self.pushed.add(oid)
        everything = len(self.pushed) == len(self.local)
        rt, proc = self.rt, self.proc
        sg = rt.server_group
        node, targets = [], set()
        sids = self.layout.param_slices[oid]
        last_gateway = max((i for i, r in enumerate(routes) if r == "gateway"), default=-1)
        for i, (sid, route) in enumerate(zip(sids, routes, strict=True)):
            s = self.layout.slices[sid]
            args = (sg, s.server, rt.group, rt.windex, sid, step, self.local[oid])
            if route == "remote":
                q = proc.server_proc[(sg, s.server)]
                grad = buf[s.start : s.start + s.size]
                self.batches[q].append((oid, sid, (*args, grad)))
                self.batch_bytes[q] += grad.nbytes
                targets.add(q)
            elif route == "gateway":  # the gateway reads the slice from the gradient buffer
                flags = FLUSH if everything and i == last_gateway else 0
                send(proc.gateway_fd(rt.group), REQUEST, *args, flags)
                self.unflushed = not flags
                node.append(sid)
            else:  # the server reads the slice from the shared gradient buffer
                send(proc.request_fd(sg, s.server), REQUEST, *args, 0)
                node.append(sid)
        if node:
            self.waiting_node[oid] = node
        if everything and self.unflushed:  # this Param had no slice for the gateway
            self._flush_gateway()
        for q in list(self.batches) if everything else targets:
            if everything or self.batch_bytes[q] >= BATCH_BYTES:
                self._flush(q)

    def _flush_gateway(self) -> None:
        """Tell the gateway to send what it holds (a FLUSH record without a slice)."""
        rt = self.rt
        send(self.proc.gateway_fd(rt.group), REQUEST, rt.server_group, 0, rt.group, rt.windex,
             -1, -1, 0, FLUSH)  # fmt: skip
        self.unflushed = False

    def _flush(self, q: int) -> None:
        queued = self.batches.pop(q, None)
        self.batch_bytes.pop(q, None)
        if not queued:
            return
        call = PushCall(self.proc.peers[q], [item for _, _, item in queued])
        for position, (oid, sid, _) in enumerate(queued):
            entry = self.remote.setdefault(oid, [])
            if not entry or entry[-1][0] is not call:  # one user per (call, Param)
                self.users[call] += 1
            entry.append((call, position, sid))

    def _landing(self, oid: int) -> np.ndarray:
        """Where a Param's new values are written: its value (flat), or for a Param on a GPU
        a host buffer copied to the device once all its slices are in."""
        owner = self.shares[oid][0].owner
        if owner.device.is_host:
            return owner.value.reshape(-1)
        buf = self.landing.get(oid)
        if buf is None:
            buf = self.landing[oid] = to_host(owner.value).reshape(-1).copy()
        return buf

    def collect(self, param) -> None:
        oid = param.owner.id
        if (
            oid not in self.waiting_node
            and oid not in self.remote
            and not any(o == oid for b in self.batches.values() for o, _, _ in b)
        ):
            return  # nothing of this Param is out
        version = None
        # before waiting for anything, send what is queued: a server may be waiting for it
        # (the other workers of the group wait for their answers meanwhile)
        for q in list(self.batches):
            self._flush(q)
        node = self.waiting_node.pop(oid, None)
        if node:
            if self.unflushed:  # the gateway may be holding this worker's part back
                self._flush_gateway()
            for sid in node:
                while sid not in self.versions:
                    if self.reply_pipe.wait(0.2):
                        self.versions.update(self.reply_pipe.read_records(REPLY))
                    else:
                        self.rt.ctx.check_abort()
            rt = self.rt
            viewed = oid in rt.viewed
            flat = self._landing(oid)
            for sid in node:
                v = self.versions.pop(sid)
                version = v if version is None else min(version, v)
                if not viewed:
                    s = self.layout.slices[sid]
                    src = self.sources[sid]
                    flat[s.start : s.start + s.size] = src[s.offset : s.offset + s.size]
        remote = self.remote.pop(oid, None)
        if remote:
            flat = self._landing(oid)
            for call in dict.fromkeys(c for c, _, _ in remote):
                if call not in self.answers:
                    self.answers[call] = call.answers(self.rt.ctx.get(call.refs))
            for call, position, sid in remote:
                v, value = self.answers[call][position]
                s = self.layout.slices[sid]
                flat[s.start : s.start + s.size] = value
                version = v if version is None else min(version, v)
            for call in dict.fromkeys(c for c, _, _ in remote):
                self.users[call] -= 1
                if self.users[call] == 0:
                    del self.users[call], self.answers[call]
        owner = self.shares[oid][0].owner
        if not owner.device.is_host:  # the values landed on the host: to the device
            copy_into(owner.value, self._landing(oid).reshape(owner.shape))
        if version is not None:
            for q in self.shares[oid]:
                q.version = version
                q.refresh()  # replicas on another device (a hybrid group)


class RayBridgeTransport(BridgeTransport):
    def __init__(self, rt, pair) -> None:
        proc = rt.ctx.proc
        self.inbox = rt.ctx.inbox
        self.key = pair.key
        self.to_dst = proc.worker_handle(pair.group, pair.dst_part)
        self.to_src = proc.worker_handle(pair.group, pair.src_part)

    def send_data(self, src) -> None:
        self.to_dst.deliver.remote(("bdata", self.key), to_host(src.data))

    def recv_data(self, dst, pair) -> None:
        copy_into(dst.data, self.inbox.get(("bdata", self.key)).reshape(dst.data.shape))

    def send_grad(self, dst, pair) -> None:
        self.to_src.deliver.remote(("bgrad", self.key), to_host(dst.grad))

    def recv_grad(self, src) -> None:
        copy_into(src.grad, self.inbox.get(("bgrad", self.key)).reshape(src.grad.shape))


class RayWorker(WorkerThread):
    engine_name = "ray"

    # -- transport (see WorkerThread) ----------------------------------------------------------
    def _connect(self) -> None:
        proc = self.ctx.proc
        self.values, self.versions = proc.values, proc.versions
        # as with shm: Params may be views into the values their server updates, when one
        # process of this node holds all of a Param's slices (see bind_value)
        self.views = self.topo.share_memory or self.topo.nworkers_per_group > 1
        self.viewed: set[int] = set()

    def bind_value(self, p, info) -> None:
        proc, sg = self.ctx.proc, self.server_group
        sids = self.layout.param_slices[p.id]
        holders = {proc.server_proc[(sg, self.layout.slices[s].server)] for s in sids}
        if self.views and p.device.is_host and len(holders) == 1 and holders <= proc.local:
            src = proc.value_views[(holders.pop(), sg)]
            p.value = src[info.offset : info.offset + info.size].reshape(p.shape)
            self.viewed.add(p.id)
        else:
            copy_into(p.value, self.values[info.offset : info.offset + info.size].reshape(p.shape))

    def make_stub(self):
        return self.stub

    def bridge_transport(self, pair):
        return RayBridgeTransport(self, pair)

    def stop_signal(self) -> int:
        return self.ctx.stop_signal

    def stop_at(self) -> int:
        return self.ctx.stop_at.get(self.group, -1)

    def after_step(self, step: int) -> None:
        if self.wid == 0:
            self.ctx.proc.note_step(self.group, step + 1)  # steps done
            delay = self.shared.extras.get("step_delay")
            if delay and int(delay[0]) == self.group:  # the test hook SINGA_RAY_STEP_DELAY
                time.sleep(float(delay[1]))
        super().after_step(step)

    def set_stop_at(self, step: int) -> None:
        """Worker 0 of a partitioned group decides, after its step ``s``, where the group
        stops. The others are then somewhere in step ``s``, ``s + 1`` or waiting in step
        ``s + 2`` for this worker's part of step ``s + 1`` (each step needs every worker's
        gradients of the one before), and the message reaches them in their own time: so
        the group stops after ``s + 2`` (shm, whose flag is seen at once, says ``s + 1``)
        and this worker goes on only once every other process has the message."""
        if self.topo.nworkers_per_group > 1:
            step += 1
        self.ctx.stop_at[self.group] = step
        proc = self.ctx.proc
        others = {proc.worker_proc[(self.group, j)] for j in range(self.topo.nworkers_per_group)}
        self.ctx.get(
            [
                proc.peers[i].set_stop_at.remote(self.group, step)
                for i in sorted(others - {proc.index})
            ]
        )

    def start_gate(self) -> None:
        # the stub first: its registrations with a gateway are in the gateway's pipe
        # before any worker can start (see gateway)
        self.stub = RayStub(self, self.net)
        self.stub.register()
        self.ctx.send(("ready", (self.group, self.wid)))
        while not self.ctx.gate.wait(0.2):
            self.ctx.check_abort()

    def wait_for_group(self, own_params) -> None:
        if self.topo.nworkers_per_group == 1:
            return
        target = min((p.version for p in own_params), default=0)
        proc, sg = self.ctx.proc, self.server_group
        refs = []
        for j in range(self.topo.nservers_per_group):
            sids = [
                s.id
                for s in self.layout.slices_of_server(j)
                if self.layout.params[s.param].num_total
            ]
            refs.append(
                proc.server_handle(sg, j).wait_versions.remote(sg, j, sids, target, GROUP_WAIT)
            )
        self.ctx.get(refs)

    def param_records(self) -> tuple[list, dict]:
        """None: the driver takes the values from the servers (see checkpoints)."""
        return None, {}

    def save_checkpoint(self, step: int, records, state) -> str:
        """The driver snapshots server group 0, writes the checkpoint in its workspace and
        answers with the path."""
        self.ctx.send(("checkpoint", step, records, state))
        return self.ctx.inbox.get(("checkpoint", step))

    def publish_layer_states(self, step: int, evaluated=()) -> str:
        states = ckpt.layer_states({kTrain: self.net})
        self.ctx.proc.worker_handle(0, 0).deliver.remote(("layers", step, self.wid), states)
        return ""

    def partition_states(self, step: int) -> dict:
        merged: dict = {}
        for wid in range(1, self.topo.nworkers_per_group):
            states = self.ctx.inbox.get(("layers", step, wid), timeout=GROUP_WAIT)
            for phase, layers in (states or {}).items():
                merged.setdefault(phase, {}).update(layers)
        return merged
