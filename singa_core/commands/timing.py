"""``singa time``: where a training step's time goes, per layer (like ``caffe time``).

:func:`time_training_step` builds the job's train net (unrolled and partitioned as for
training, Params initialised or loaded as ``singa train`` would) and runs the worker's
``train_one_batch`` on real batches from the job's data ``iterations`` times after
``warmup`` untimed ones. Every layer's ``forward`` and ``backward`` calls are timed by
wrapping them on the instance; the updater is applied through a server-side
:class:`~singa_core.contracts.stub.ParamShard` in memory (so later iterations see trained values, as
training would) and timed in the stub's ``update``. Nothing is written: no checkpoint,
no metrics.jsonl, no workspace.

The step's time splits into the layers' forward and backward, the updater (the server
side's ``ParamShard.update``; a plain SGD update folded into its weight gradient's GEMM,
as training folds it, counts in the layer's backward) and the engine: the rest of the
measured ``train_one_batch``
(the worker's traversal, the stub's calls). Their sum is the measured step, taken on the
in-process path (one process, values shared with the server side).

A layer that knows its floating-point operations (``Layer.flops``) gets a GFLOP/s
column. The copies of an unrolled layer (``i#L``) are summed into one row per configured
layer (a worker that runs them at once, kBPTT, is timed in that row by its run); the
partitions of a partitioned layer (``L@j``) keep their own rows.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

from singa_core.contracts.layer import InputLayer, kTrain
from singa_core.contracts.names import base_layer_name
from singa_core.contracts.stub import ParamShard, ParamStub, fold_updates, hand_over
from singa_core.netbuilder.specs import layer_type_name


@dataclass
class LayerTime:
    name: str
    type: str
    shape: tuple[int, ...]
    forward: list[float] = field(default_factory=list)  # seconds per iteration
    backward: list[float] = field(default_factory=list)
    flops: tuple[float, float] | None = None  # (forward, backward) per iteration
    input: bool = False  # an input layer (reading, decoding, augmenting the batch)


@dataclass
class StepTiming:
    """Per-iteration seconds of every part of a training step."""

    layers: list[LayerTime]
    updater: list[float]
    step: list[float]
    iterations: int
    warmup: int
    #: (count, why) when the BLAS thread count was chosen by timing training steps
    threads: tuple[int, str] | None = None

    @staticmethod
    def _mean(xs: list[float]) -> float:
        return statistics.fmean(xs) if xs else 0.0

    @property
    def engine(self) -> list[float]:
        """The rest of each measured step: worker traversal and stub calls."""
        out = []
        for i, total in enumerate(self.step):
            parts = sum(lt.forward[i] + lt.backward[i] for lt in self.layers) + self.updater[i]
            out.append(total - parts)
        return out

    def rows(self) -> list[dict]:
        step_ms = 1000 * self._mean(self.step)
        rows = []
        for lt in self.layers:
            fwd, bwd = 1000 * self._mean(lt.forward), 1000 * self._mean(lt.backward)
            gflops = None
            if lt.flops is not None and fwd + bwd > 0:
                gflops = sum(lt.flops) / ((fwd + bwd) / 1000) / 1e9
            rows.append(
                {
                    "layer": lt.name,
                    "type": lt.type,
                    "shape": list(lt.shape),
                    "forward_ms": fwd,
                    "backward_ms": bwd,
                    "share": (fwd + bwd) / step_ms if step_ms else 0.0,
                    "gflop_per_s": gflops,
                    "flops": list(lt.flops) if lt.flops is not None else None,
                }
            )
        return rows

    def as_dict(self) -> dict:
        step_ms = 1000 * self._mean(self.step)
        upd, eng = 1000 * self._mean(self.updater), 1000 * self._mean(self.engine)
        layers = self.rows()
        fwd = sum(r["forward_ms"] for r in layers)
        bwd = sum(r["backward_ms"] for r in layers)
        inp = sum(1000 * self._mean(lt.forward) for lt in self.layers if lt.input)
        return {
            "iterations": self.iterations,
            "warmup": self.warmup,
            "layers": layers,
            "forward_ms": fwd,
            "backward_ms": bwd,
            "input_ms": inp,  # the input layers' share of the layers' time
            "input_share": inp / step_ms if step_ms else 0.0,
            "updater_ms": upd,
            "updater_share": upd / step_ms if step_ms else 0.0,
            "engine_ms": eng,
            "engine_share": eng / step_ms if step_ms else 0.0,
            "sum_ms": fwd + bwd + upd + eng,
            "step_ms": step_ms,
            "step_ms_median": 1000 * statistics.median(self.step) if self.step else 0.0,
        }

    def table(self) -> list[str]:
        d = self.as_dict()
        heads = ("layer", "type", "output", "forward ms", "backward ms", "share", "GFLOP/s")
        body = []
        for r in d["layers"]:
            g = r["gflop_per_s"]
            body.append(
                (
                    r["layer"],
                    r["type"],
                    "x".join(str(s) for s in r["shape"]) or "-",
                    f"{r['forward_ms']:.3f}",
                    f"{r['backward_ms']:.3f}",
                    f"{100 * r['share']:.1f}%",
                    f"{g:.1f}" if g is not None else "",
                )
            )
        body.append(("layers", "", "", f"{d['forward_ms']:.3f}", f"{d['backward_ms']:.3f}", "", ""))
        body.append(
            (
                "updater",
                "",
                "",
                f"{d['updater_ms']:.3f}",
                "",
                f"{100 * d['updater_share']:.1f}%",
                "",
            )
        )
        body.append(
            ("engine", "", "", f"{d['engine_ms']:.3f}", "", f"{100 * d['engine_share']:.1f}%", "")
        )
        widths = [max(len(h), *(len(row[i]) for row in body)) for i, h in enumerate(heads)]
        right = {3, 4, 5, 6}

        def fmt(row):
            return "  ".join(
                (c.rjust(w) if i in right else c.ljust(w))
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            ).rstrip()

        out = [fmt(heads), fmt(tuple("-" * w for w in widths))]
        n = len(d["layers"])
        out += [fmt(row) for row in body[:n]]
        out.append(fmt(tuple("-" * w for w in widths)))
        out += [fmt(row) for row in body[n:]]
        out.append(
            f"input: {d['input_ms']:.3f} ms of the step ({100 * d['input_share']:.1f}%) in the "
            "input layers (reading, decoding, augmenting; with prefetching, waiting for the "
            "next batch)"
        )
        out.append(
            f"step: {d['step_ms']:.3f} ms mean (median {d['step_ms_median']:.3f}) over "
            f"{d['iterations']} iterations after {d['warmup']} warm-up; layers + updater + "
            f"engine = {d['sum_ms']:.3f} ms"
        )
        return out


class _TimedStub(ParamStub):
    """The in-process stub (values shared with the shard) with the server side timed."""

    def __init__(self, shard: ParamShard, params) -> None:
        self.shard = shard
        self.seconds = 0.0
        self.shares: dict[int, list] = {}
        for p in params:
            self.shares.setdefault(p.owner.id, []).append(p)

    def collect(self, param) -> None:
        pass  # the shard updates the shared values before update() returns

    def update(self, step: int, param) -> None:
        t0 = time.perf_counter()
        version = hand_over(self.shard, step, param)  # as the in-process engine does
        self.seconds += time.perf_counter() - t0
        if version is not None:
            for q in self.shares[param.owner.id]:
                q.version = version


def _timed(fn, sink: list[float], sync=lambda: None):
    """``fn`` adding its wall time to ``sink[0]``; ``sync`` waits for the layer's device
    (a GPU queues kernels: without it a layer's time would show up in a later one's)."""

    def call(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            sync()
            sink[0] += time.perf_counter() - t0

    return call


def time_training_step(
    prepared, iterations: int, warmup: int = 2, choose_threads: bool = False
) -> StepTiming:
    """Time ``iterations`` training steps of ``prepared``'s train net (see the module
    docstring); ``prepared`` comes from :func:`singa_core.running.job.prepare_job`.

    With ``choose_threads`` the BLAS thread count is chosen first as `singa train` chooses
    it, by timing training steps at 1 thread and at every usable CPU
    (:func:`singa_core.running.thread_trial.timed_choice`): what the command times, whatever
    the worker's algorithm (a forward pass alone computes nothing in a contrastive-divergence
    net). The trial's steps count as warm-up (nothing is written either way);
    :attr:`StepTiming.threads` says what was chosen and why."""
    net = prepared.nets.get(kTrain) or prepared.build_net(kTrain)
    worker = prepared.make_worker()
    shard = ParamShard(prepared.make_updater())
    shard.put_net(net)
    stub = _TimedStub(shard, net.params)
    folds = fold_updates(shard, net.params)  # as training folds plain SGD (into backward)

    def one_step(step: int) -> None:
        for f in folds:
            f.arm(step)
        worker.train_one_batch(step, net, stub)
        for f in folds:
            f.disarm()
        for device in set(prepared.devices):
            device.synchronize()

    threads = None
    if choose_threads:
        from singa_core.contracts.resources import usable_cpus
        from singa_core.running.thread_trial import timed_choice

        threads = timed_choice(lambda: one_step(int(prepared.start_step)), usable_cpus())

    rows: dict[str, LayerTime] = {}
    sinks: list[tuple[LayerTime, list[float], list[float]]] = []
    for layer in net.layers:
        key = base_layer_name(layer.name)
        lt = rows.get(key)
        if lt is None:
            lt = rows[key] = LayerTime(
                key,
                layer_type_name(net.specs[layer.name].conf),
                layer.shape,
                input=isinstance(layer, InputLayer),
            )
        flops = layer.flops(net.srclayers(layer))
        if flops is not None:
            old = lt.flops or (0.0, 0.0)
            lt.flops = (old[0] + float(flops[0]), old[1] + float(flops[1]))
        fsink, bsink = [0.0], [0.0]
        sync = layer.device.synchronize
        layer.forward = _timed(layer.forward, fsink, sync)
        layer.backward = _timed(layer.backward, bsink, sync)
        sinks.append((lt, fsink, bsink))
    # a worker running all copies of a layer at once (kBPTT's units, see
    # singa_core.contracts.sequences) calls the unit, not the copies: time it in their row
    runs = [u for u in net.units() if getattr(u, "copies", None)]
    for run in runs:
        lt = rows[base_layer_name(run.copies[0].name)]
        fsink, bsink = [0.0], [0.0]
        sync = run.copies[0].device.synchronize
        run.forward = _timed(run.forward, fsink, sync)
        run.backward = _timed(run.backward, bsink, sync)
        sinks.append((lt, fsink, bsink))

    updater_s, step_s = [], []
    try:
        for it in range(warmup + iterations):
            for _, fsink, bsink in sinks:
                fsink[0] = bsink[0] = 0.0
            stub.seconds = 0.0
            t0 = time.perf_counter()
            one_step(int(prepared.start_step) + it)
            total = time.perf_counter() - t0
            if it < warmup:
                continue
            step_s.append(total)
            updater_s.append(stub.seconds)
            per_row: dict[int, list[float]] = {}
            for lt, fsink, bsink in sinks:
                acc = per_row.setdefault(id(lt), [0.0, 0.0])
                acc[0] += fsink[0]
                acc[1] += bsink[0]
            for lt in rows.values():
                f, b = per_row[id(lt)]
                lt.forward.append(f)
                lt.backward.append(b)
    finally:
        for obj in [*net.layers, *runs]:  # back to the class's methods
            obj.__dict__.pop("forward", None)
            obj.__dict__.pop("backward", None)
    return StepTiming(list(rows.values()), updater_s, step_s, iterations, warmup, threads)
