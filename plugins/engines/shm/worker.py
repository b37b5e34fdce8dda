"""A worker thread (SINGA 0.3 §5.2-5.4): its net, its ParamStub, the TrainingLoop.

Values are read from the server group's segment ``v<sg>``: with ``share_memory`` the
Params' ``value`` arrays are views into it, otherwise copies refreshed when a Param is
collected. Gradients are summed per owner Param into the worker's segment ``g<w>``; one
``("upd", ...)`` message per slice tells the slice's server. ``collect(p)`` waits for the
``("ver", ...)`` replies of every slice of ``p`` after its last update.
"""

from __future__ import annotations

import inspect
import json
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
from singa_builtins.engines.shm.bridge import ShmBridgeTransport, install_bridges
from singa_builtins.engines.shm.context import Mailbox, ProcessContext

from singa_core.device import CPU, copy_into, to_host
from singa_core.layer import kTrain
from singa_core.netbuilder.net import stable_seed
from singa_core.running import checkpoint as ckpt
from singa_core.running.fileio import atomic_write_bytes
from singa_core.running.job import updater_type_name
from singa_core.running.training import TrainingLoop
from singa_core.stub import ParamStub


def _is_ver(m) -> bool:
    return m[0] == "ver"


class ShmStub(ParamStub):
    def __init__(self, rt: WorkerThread, net) -> None:
        self.rt = rt
        self.layout = rt.layout
        self.local = Counter(p.owner.id for p in net.params if p.grad_owner is p)
        self.shares: dict[int, list] = defaultdict(list)
        for p in net.params:
            self.shares[p.owner.id].append(p)
        self.counts: dict[int, int] = defaultdict(int)
        self.pending: dict[int, int] = {}
        self.new_version: dict[int, int] = {}

    def update(self, step: int, param) -> None:
        oid = param.owner.id
        info = self.layout.params[oid]
        buf = self.rt.grad[info.offset : info.offset + info.size]
        if self.counts[oid] == 0:
            # the server may still be reading this Param's previous gradient from the buffer
            while self.pending.get(oid):
                self._on_version(self.rt.mailbox.wait(_is_ver))
            copy_into(buf, param.grad.reshape(-1))  # a device's gradient: to the host
        else:
            buf += to_host(param.grad).reshape(-1)
        self.counts[oid] += 1
        if self.counts[oid] < self.local[oid]:
            return
        self.counts[oid] = 0
        while self.pending.get(oid):  # the previous update of this Param is still out
            self._on_version(self.rt.mailbox.wait(_is_ver))
        sids = self.layout.param_slices[oid]
        self.pending[oid] = len(sids)
        self.new_version[oid] = -1
        rt = self.rt
        for sid in sids:
            server = self.layout.slices[sid].server
            rt.shared.server_queues[(rt.server_group, server)].put(
                ("upd", rt.group, rt.windex, oid, sid, step, self.local[oid])
            )

    def collect(self, param) -> None:
        oid = param.owner.id
        while self.pending.get(oid):
            self._on_version(self.rt.mailbox.wait(_is_ver))

    def _on_version(self, msg) -> None:
        _, oid, _sid, version = msg
        v = self.new_version[oid]
        self.new_version[oid] = version if v < 0 else min(v, version)
        self.pending[oid] -= 1
        if self.pending[oid]:
            return
        for q in self.shares[oid]:
            q.version = self.new_version[oid]
        owner = self.shares[oid][0].owner
        info = self.layout.params[oid]
        flat = self.rt.values[info.offset : info.offset + info.size]
        if not (self.rt.views and owner.device.is_host):
            copy_into(owner.value, flat.reshape(owner.shape))  # a copy (on the host or a GPU)
        for q in self.shares[oid]:
            q.refresh()  # replicas on another device (a hybrid group)


class _ReporterProxy:
    """The display worker's reporter: every call goes to the launcher's Reporter."""

    def __init__(self, ctx: ProcessContext) -> None:
        self.ctx = ctx
        # the launcher's Reporter takes Param histograms (TrainingLoop asks before sending)
        self.param_histograms = bool(ctx.shared.extras.get("param_histograms", False))

    def __getattr__(self, name):
        def call(*args, **kwargs):
            self.ctx.send(("report", name, args, kwargs))

        return call


class _NullReporter:
    def __getattr__(self, name):
        return lambda *a, **k: None


class _StopAware:
    """The worker plugin, plus a check for the launcher's stop request after each step."""

    def __init__(self, inner, rt: WorkerThread) -> None:
        self.inner = inner
        self.rt = rt

    def train_one_batch(self, step, net, stub) -> None:
        self.inner.train_one_batch(step, net, stub)
        self.rt.after_step(step)

    def test_one_batch(self, phase, net) -> None:
        self.inner.test_one_batch(phase, net)
        self.rt.after_test_batch()

    def __getattr__(self, name):
        return getattr(self.inner, name)


class WorkerThread:
    """A worker of the shm engine. The parts that touch shared memory and queues are the
    methods marked "transport" below; another engine (``ray``) overrides just those."""

    engine_name = "shm"

    def __init__(self, ctx: ProcessContext, group: int, wid: int) -> None:
        sh = ctx.shared
        self.ctx, self.shared = ctx, sh
        self.group, self.wid = group, wid
        self.topo, self.layout = sh.topology, sh.layout
        self.windex = self.topo.worker_index(group, wid)
        self.server_group = self.topo.server_group_of(group)
        self.leader = group == 0 and wid == 0  # displays, tests, checkpoints (0.3)
        # worker j of every group on the device of the group's worker j (job.conf's gpu[j],
        # or --device); its Params are copies refreshed when collected, its gradients go to
        # the servers (on the host) through its segment
        devices = ctx.prepared.devices
        self.device = devices[wid] if wid < len(devices) else CPU
        self.loop: TrainingLoop | None = None
        self._connect()

    # -- transport ---------------------------------------------------------------------------
    def _connect(self) -> None:
        """``values`` (flat, the server group's) and ``versions`` (per slice) to build the
        net from; ``views``: whether Params may be views into ``values``."""
        ctx, sh = self.ctx, self.shared
        self.mailbox = Mailbox(sh.worker_queues[(self.group, self.wid)], ctx)
        self.values = ctx.segs[f"v{self.server_group}"]
        self.versions = ctx.segs[f"n{self.server_group}"]
        self.state = ctx.segs[f"s{self.server_group}"]
        self.grad = ctx.segs[f"g{self.windex}"]
        self.views = self.topo.share_memory or self.topo.nworkers_per_group > 1

    def bind_value(self, p, info) -> None:
        """Give owner Param ``p`` its value: a view into ``values`` or a copy of it."""
        flat = self.values[info.offset : info.offset + info.size]
        if self.views and p.device.is_host:
            p.value = flat.reshape(p.shape)
        else:  # a copy: no views, or a Param on a GPU (refreshed when collected)
            copy_into(p.value, flat.reshape(p.shape))

    def make_stub(self) -> ParamStub:
        return ShmStub(self, self.net)

    def bridge_transport(self, pair):
        return ShmBridgeTransport(self, pair)

    def stop_signal(self) -> int:
        """The signal the launcher asked to stop for (0: none)."""
        return self.shared.stop_signal.value

    def stop_at(self) -> int:
        """The last step this worker's group trains (-1: not decided)."""
        return self.shared.stop_at[self.group]

    def set_stop_at(self, step: int) -> None:
        self.shared.stop_at[self.group] = step

    def start_gate(self) -> None:
        """Wait until every worker has built its net, so that all groups start together
        (0.3 slept a second instead); a slow process start cannot let one group finish
        before the others begin."""
        sh, topo = self.shared, self.topo
        with sh.ready.get_lock():
            sh.ready.value += 1
        total = topo.nworker_groups * topo.nworkers_per_group
        while sh.ready.value < total:
            self.ctx.check_abort()
            time.sleep(0.002)

    def param_records(self) -> tuple[list, dict]:
        """The checkpoint's ParamRecords (versions and values of the server group) and
        updater state arrays."""
        total = self.layout.total
        records, arrays = [], {}
        for pid in self.layout.order:
            info = self.layout.params[pid]
            sl = slice(info.offset, info.offset + info.size)
            records.append(
                ckpt.ParamRecord(info.name, self._version(pid), self.values[sl].reshape(info.shape))
            )
            if info.learnable:
                for k, sname in enumerate(self.shared.state_names):
                    block = self.state[
                        k * total + info.offset : k * total + info.offset + info.size
                    ]
                    arrays[f"{info.name}::{sname}"] = block.reshape(info.shape).copy()
        return records, arrays

    def save_checkpoint(self, step: int, records: list, state) -> str:
        prepared = self.ctx.prepared
        return str(
            ckpt.write_checkpoint(
                prepared.workspace, step, 0, records, state, keep=prepared.job.keep_checkpoints
            )
        )

    # -- nets --------------------------------------------------------------------------
    def _build(self):
        prepared, wpg = self.ctx.prepared, self.topo.nworkers_per_group
        if wpg > 1:
            if "num_partitions" not in inspect.signature(prepared.build_net).parameters:
                raise RuntimeError("nworkers_per_group > 1 needs build_net(num_partitions=)")
            # this worker's partition on its device, the others (which it does not run) on
            # the host
            devices = [self.device if j == self.wid else CPU for j in range(wpg)]
            full = prepared.build_net(kTrain, num_partitions=wpg, init=False, devices=devices)
            net = full.partition_view(self.wid)
        else:
            full = net = prepared.build_net(
                kTrain, init=False, devices=[self.device], **self._one_partition
            )
        if self.group > 0:  # other data (random_skip) and dropout masks than group 0
            for n in {id(full): full, id(net): net}.values():
                for layer in n.layers:
                    layer.ctx.rng = np.random.default_rng(
                        stable_seed(prepared.seed, "layer", layer.name, kTrain, "group", self.group)
                    )
        for p in full.owner_params:
            self.bind_value(p, self.layout.params[p.id])
            p.version = self._version(p.id)
        for p in full.params:
            if not p.is_owner:
                if p.device == p.owner.device:
                    p.value = p.owner.value
                else:
                    p.refresh()  # a replica on another device: a copy
                p.version = p.owner.version
        nets = {kTrain: net}
        if self.leader:
            for phase in prepared.phases()[1:]:
                other = prepared.build_net(
                    phase, init=True, devices=[self.device], **self._one_partition
                )
                other.share_params_from(full, prepared.cfg.locate)
                nets[phase] = other
        if self.shared.layer_states and self.group == 0:  # every partition's data cursors
            ckpt.restore_layer_states(nets, self.shared.layer_states)
        install_bridges(self, full, net)
        return full, net, nets

    @property
    def _one_partition(self) -> dict:
        """build_net's arguments for an unpartitioned net (test nets, as 0.3)."""
        params = inspect.signature(self.ctx.prepared.build_net).parameters
        return {"num_partitions": 1} if "num_partitions" in params else {}

    def _version(self, pid: int) -> int:
        sids = self.layout.param_slices[pid]
        return int(min(self.versions[s] for s in sids)) if sids else 0

    # -- checkpoints (group 0, worker 0) ---------------------------------------------------
    def wait_for_group(self, own_params) -> None:
        """With a partitioned group, wait (a while) until the other workers' Params have
        caught up with this worker's, so the checkpoint holds one step of all of them."""
        if self.topo.nworkers_per_group == 1:
            return
        target = min((p.version for p in own_params), default=0)
        deadline = time.monotonic() + 10
        for pid, info in self.layout.params.items():
            while info.num_total and self._version(pid) < target and time.monotonic() < deadline:
                self.ctx.check_abort()
                time.sleep(0.005)

    def _states_file(self, step: int, wid: int) -> Path:
        return self.shared.workspace_path / "checkpoint" / f".step{step}-part{wid}.layers.json"

    def publish_layer_states(self, step: int, evaluated=()) -> str:
        """Workers 1… of a partitioned group 0, at each checkpoint step: hand their layers'
        states (data cursors, random states) to worker 0, which writes the checkpoint."""
        path = self._states_file(step, self.wid)
        states = ckpt.layer_states({kTrain: self.net})
        atomic_write_bytes(path, json.dumps(states).encode(), what="layer states")
        return str(path)

    def partition_states(self, step: int) -> dict:
        """The other partitions' layer states for checkpoint ``step`` (see above)."""
        merged: dict = {}
        for wid in range(1, self.topo.nworkers_per_group):
            path = self._states_file(step, wid)
            deadline = time.monotonic() + 10
            while not path.exists() and time.monotonic() < deadline:
                self.ctx.check_abort()
                time.sleep(0.002)
            if path.exists():
                for phase, layers in json.loads(path.read_text()).items():
                    merged.setdefault(phase, {}).update(layers)
                path.unlink()
        return merged

    def write_checkpoint(self, step: int, evaluated=()) -> str:
        prepared = self.ctx.prepared
        self.wait_for_group(self.net.owner_params)
        layers = ckpt.layer_states(self.nets)
        for phase, states in self.partition_states(step).items():
            layers.setdefault(phase, {}).update(states)
        records, arrays = self.param_records()
        state = ckpt.TrainingState(
            step=step,
            meta={
                "seed": prepared.seed,
                "updater": updater_type_name(prepared.job.updater),
                "plugins": [f"{d} {v}" for d, v in prepared.host.distributions()],
                "layers": layers,
                "engine": self.engine_name,
                "evaluated": list(evaluated),
            },
            arrays=arrays,
        )
        return self.save_checkpoint(step, records, state)

    # -- stopping (Ctrl-C / SIGTERM to the launcher) ---------------------------------------
    def after_step(self, step: int) -> None:
        sig = self.stop_signal()
        if sig and self.wid == 0 and self.stop_at() < 0:
            # partitioned groups: the others may be one step behind; all stop after the next
            self.set_stop_at(step + (1 if self.topo.nworkers_per_group > 1 else 0))
        at = self.stop_at()
        if at >= 0 and step >= at and self.loop is not None:
            self.loop.request_stop(sig or None)

    def after_test_batch(self) -> None:
        """A stop request reaches the display worker's evaluation pass after each batch, so
        the pass ends there (TrainingLoop.evaluate). The workers of a partitioned group
        train each step together, so there the pass is finished and they stop after it."""
        sig = self.stop_signal()
        if sig and self.topo.nworkers_per_group == 1 and self.loop is not None:
            self.loop.request_stop(sig)

    @property
    def _checkpoint_part(self):
        partitioned = self.group == 0 and self.topo.nworkers_per_group > 1
        return self.publish_layer_states if partitioned else None

    def run(self) -> None:
        with self.device.activate():  # a GPU worker's kernels run on its own GPU
            self._run()

    def _run(self) -> None:
        prepared = self.ctx.prepared
        self.full, self.net, self.nets = self._build()
        self.start_gate()
        reporter = _ReporterProxy(self.ctx) if self.leader else _NullReporter()
        self.loop = TrainingLoop(
            prepared.job,
            worker=_StopAware(prepared.make_worker(), self),
            stub=self.make_stub(),
            train_net=self.net,
            nets=self.nets,
            checkpoint=self.write_checkpoint if self.leader else self._checkpoint_part,
            reporter=reporter,
            lr=prepared.make_updater().lr,
            is_display_worker=self.leader,
        )
        step, last, interrupted = self.loop.run(
            self.shared.start_step,
            resumed=self.shared.resumed,
            done_evaluations=self.shared.extras.get("evaluated", ()),
        )
        # wait for the replies to the last updates: every message this worker put on a
        # server's queue has then been read (a process leaving with a message half-written
        # would keep that queue's lock)
        self.loop.stub.collect_all(self.net.params)  # replicas' updates too (owned elsewhere)
        self.ctx.send(
            (
                "done",
                (self.group, self.wid),
                {
                    "final_step": step,
                    "checkpoint": last,
                    "metrics": self.loop.last_metrics,
                    "interrupted": interrupted,
                    "stop_signal": self.loop.stop_signal,
                },
            )
        )
