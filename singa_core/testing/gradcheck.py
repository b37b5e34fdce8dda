"""A Caffe-style finite-difference gradient checker for layers, plus small fixtures.

Part of the plugin author's kit (``singa_core.testing``). Usage::

    src = SourceLayer(rng.standard_normal((4, 5)))
    layer = build(InnerProductLayer, 'name: "ip" innerproduct_conf { num_output: 3 } '
                  'param { name: "w" } param { name: "b" }', [src])
    GradientChecker(stepsize=1e-2, threshold=1e-3).check(layer, [src])

The checker follows caffe/test/test_gradient_check_util.hpp: it puts an objective on the
layer's output — ``L = Σ data·G`` with a fixed random ``G`` written into the layer's gradient
buffer (or, for loss layers, ``L = loss_scale · layer.loss``) — runs forward/backward to get
the analytic gradients of every source (the buffers ``src.grad_for(layer)``) and every Param,
then perturbs each checked element by ``±stepsize`` and compares the central difference with
``|analytic − numeric| <= threshold · max(|analytic|, |numeric|, 1)``.

Layers compute in float32, so the perturbation is applied to the float32 arrays and the
step actually taken (``x+ − x−`` after rounding to float32) is used in the difference
quotient; the objective itself is summed in float64. Elements whose value lies within
``kink_range`` of ``±kink`` are skipped (non-differentiable points such as ReLU at 0), as in
Caffe. Arrays with more than ``max_checks`` elements are subsampled (with a fixed seed).
Before every forward the layer's ``ctx.rng`` is re-seeded, so random layers (dropout) use
the same randomness in every evaluation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from google.protobuf import text_format

from singa_core.contracts.device import default_device, to_host
from singa_core.contracts.layer import Layer, LayerContext, kBackward, kForward, kTrain
from singa_core.schema import job_pb2

F32 = np.float32


# -- fixtures -----------------------------------------------------------------------------
def layer_conf(text: str = "", **fields) -> job_pb2.LayerProto:
    """A ``singa.LayerProto`` from protobuf text (``name`` defaults to "layer")."""
    conf = text_format.Parse(text, job_pb2.LayerProto())
    for k, v in fields.items():
        setattr(conf, k, v)
    if not conf.name:
        conf.name = "layer"
    return conf


def make_ctx(seed: int = 0, **kw) -> LayerContext:
    """A LayerContext with ``default_rng(seed)``; other LayerContext fields by keyword."""
    return LayerContext(rng=np.random.default_rng(seed), **kw)


class SourceLayer(Layer):
    """A set-up source holding given ``data`` (and integer ``labels``).

    With ``grad=True`` it takes a gradient: ``grad_for`` returns its ``grad`` buffer (the
    same buffer for every consumer). ``grad=False`` makes it a pure label/target provider.
    """

    num_srclayers = (0, 0)
    one_to_many = True
    placement = "device"

    def __init__(self, data=None, labels=None, *, name: str = "src", grad: bool = True):
        super().__init__(job_pb2.LayerProto(name=name), make_ctx())
        if data is None:
            data = np.zeros((len(labels), 1), dtype=F32)
        dev = self.device  # the device in effect (see using_device): data are moved there
        self.data = dev.asarray(np.ascontiguousarray(to_host(data), dtype=F32))
        self.grad = np.zeros_like(self.data) if grad else None
        self.aux = None if labels is None else dev.asarray(to_host(labels), dtype=np.int32)

    def setup(self, srcs):
        pass

    def forward(self, phase, srcs):
        pass

    def grad_for(self, consumer):
        return self.grad


def batch_innermost(x) -> np.ndarray:
    """``x`` (batch on axis 0) as a strided view of a buffer that holds the batch
    innermost in memory: the layout convolution and pooling hand on (see
    ``singa_builtins.layers._window``). Same values, other strides."""
    dev = default_device()
    x = np.asarray(to_host(x), dtype=F32)
    if x.ndim < 2:
        return dev.asarray(np.array(x))
    inner = dev.asarray(np.ascontiguousarray(np.moveaxis(x, 0, -1)))  # batch innermost
    return np.moveaxis(inner, -1, 0)


def strided_source(x, labels=None, *, name: str = "src") -> SourceLayer:
    """A :class:`SourceLayer` whose ``data`` and ``grad`` are batch-innermost views."""
    src = SourceLayer(x, labels, name=name)
    src.data = batch_innermost(x)
    src.grad = np.zeros_like(src.data)  # zeros_like keeps the strides
    return src


def init_params(layer: Layer, rng: np.random.Generator, std: float = 1.0) -> None:
    """Fill every Param of ``layer`` with N(0, std²) values (what a net's init would do)."""
    for p in layer.params:
        p.value[...] = p.device.asarray((rng.standard_normal(p.shape) * std).astype(F32))


def build(
    cls,
    conf,
    srcs: Sequence[Layer],
    *,
    seed: int = 0,
    param_std: float = 1.0,
    ctx: LayerContext | None = None,
) -> Layer:
    """``cls(conf, ctx)`` set up over ``srcs``, Params filled with N(0, param_std²)."""
    if isinstance(conf, str):
        conf = layer_conf(conf)
    layer = cls(conf, ctx or make_ctx(seed))
    layer.setup(list(srcs))
    init_params(layer, np.random.default_rng(seed + 1), param_std)
    return layer


# -- the checker --------------------------------------------------------------------------
@dataclass
class Mismatch:
    what: str  # "src 0" or the param name
    index: tuple[int, ...]
    analytic: float
    numeric: float

    def __str__(self) -> str:
        return (
            f"{self.what}{list(self.index)}: analytic {self.analytic:.6g} "
            f"numeric {self.numeric:.6g}"
        )


@dataclass
class CheckReport:
    checked: int = 0
    skipped_kinks: int = 0
    mismatches: list[Mismatch] = field(default_factory=list)


@dataclass
class GradientChecker:
    stepsize: float = 1e-2
    threshold: float = 1e-3
    seed: int = 1701
    kink: float = 0.0
    kink_range: float = -1.0
    max_checks: int = 60  # per array; larger arrays are subsampled
    loss_scale: float = 1.0  # objective = loss_scale * layer.loss for loss layers
    phase: int = kTrain

    def check(
        self,
        layer: Layer,
        srcs: Sequence[Layer],
        *,
        check_srcs: Sequence[int] | None = None,
        check_params: bool = True,
        tops: Callable[[Layer], list[tuple[Callable[[], np.ndarray], np.ndarray]]] | None = None,
    ) -> CheckReport:
        """Compare analytic and numeric gradients; raises AssertionError on a mismatch.

        ``check_srcs``: indices of the sources to check (default: every source whose
        ``grad_for(layer)`` is not None). ``tops``: for layers with several outputs (split),
        a function giving ``(get_output, grad_buffer)`` pairs; default ``layer.data`` with
        ``layer.grad``.
        """
        report = self.run(layer, srcs, check_srcs=check_srcs, check_params=check_params, tops=tops)
        if report.mismatches:
            worst = sorted(report.mismatches, key=lambda m: -abs(m.analytic - m.numeric))[:10]
            lines = "\n  ".join(str(m) for m in worst)
            raise AssertionError(
                f"{len(report.mismatches)} of {report.checked} gradient checks of "
                f"'{layer.name}' failed (threshold {self.threshold}):\n  {lines}"
            )
        assert report.checked > 0, "nothing was checked"
        return report

    def run(self, layer, srcs, *, check_srcs=None, check_params=True, tops=None) -> CheckReport:
        srcs = list(srcs)
        rng = np.random.default_rng(self.seed)
        fwd_phase = self.phase | kForward
        bwd_phase = self.phase | kBackward

        if getattr(layer, "is_loss", False):
            out_pairs = []
        else:
            out_pairs = tops(layer) if tops is not None else [(lambda: layer.data, layer.grad)]
        weights = [rng.standard_normal(buf.shape) for _, buf in out_pairs]

        def objective() -> float:
            layer.ctx.rng = np.random.default_rng(self.seed + 7)
            layer.forward(fwd_phase, srcs)
            if getattr(layer, "is_loss", False):
                return float(layer.loss) * self.loss_scale
            return float(
                sum(
                    np.dot(to_host(get()).astype(np.float64).ravel(), w.ravel())
                    for (get, _), w in zip(out_pairs, weights, strict=True)
                )
            )

        if check_srcs is None:
            check_srcs = [i for i, s in enumerate(srcs) if s.grad_for(layer) is not None]
        src_bufs = {i: srcs[i].grad_for(layer) for i in check_srcs}
        for i, buf in src_bufs.items():
            if buf is None:
                raise AssertionError(f"source {i} of '{layer.name}' takes no gradient")
            buf.fill(np.nan)  # every element must be written by backward
        if check_params:
            for p in layer.params:
                p.grad.fill(np.nan)

        # analytic
        objective()
        for (_, buf), w in zip(out_pairs, weights, strict=True):
            buf[...] = layer.device.asarray(w.astype(F32))
        layer.ctx.rng = np.random.default_rng(self.seed + 7)
        layer.backward(bwd_phase, srcs)
        targets: list[tuple[str, np.ndarray, np.ndarray, bool]] = []
        for i in check_srcs:
            analytic = to_host(src_bufs[i]).astype(np.float64)
            targets.append((f"src {i}", srcs[i].data, analytic, True))
        if check_params:
            for p in layer.params:
                targets.append((p.name, p.value, to_host(p.grad).astype(np.float64), False))

        report = CheckReport()
        for what, arr, analytic, is_input in targets:
            if np.isnan(analytic).any():
                n = int(np.isnan(analytic).sum())
                raise AssertionError(
                    f"backward of '{layer.name}' left {n} elements of the "
                    f"gradient of {what} unwritten"
                )
            an = analytic.reshape(-1)
            n = arr.size
            idx = (
                np.arange(n)
                if n <= self.max_checks
                else rng.choice(n, size=self.max_checks, replace=False)
            )
            for j in idx:
                pos = np.unravel_index(j, arr.shape)  # arr may be a strided view
                x0 = F32(float(arr[pos]))  # an explicit read: a 0-d device array on a GPU
                if (
                    is_input
                    and self.kink_range >= 0
                    and (
                        self.kink - self.kink_range <= abs(float(x0)) <= self.kink + self.kink_range
                    )
                ):
                    report.skipped_kinks += 1
                    continue
                xp = F32(x0 + F32(self.stepsize))
                xm = F32(x0 - F32(self.stepsize))
                arr[pos] = xp
                lp = objective()
                arr[pos] = xm
                lm = objective()
                arr[pos] = x0
                numeric = (lp - lm) / (float(xp) - float(xm))
                a = float(an[j])
                report.checked += 1
                scale = max(abs(a), abs(numeric), 1.0)
                if not abs(a - numeric) <= self.threshold * scale:
                    report.mismatches.append(
                        Mismatch(
                            what, tuple(int(t) for t in np.unravel_index(j, arr.shape)), a, numeric
                        )
                    )
        objective()  # leave the layer's outputs consistent with the unperturbed inputs
        layer.pop_metrics()
        return report


def peak_bytes(step: Callable[[], None], *, warmup: int = 2, reps: int = 3, trials: int = 3) -> int:
    """Peak bytes traced by tracemalloc while running ``step`` ``reps`` times after warm-up
    (checks that a layer does not allocate arrays per step). tracemalloc sees every
    thread's allocations, so the least of ``trials`` measurements is returned: another
    thread's passing allocation does not count against the layer, a per-step one does."""
    import tracemalloc

    for _ in range(warmup):
        step()
    peaks = []
    for _ in range(trials):
        tracemalloc.start()
        try:
            for _ in range(reps):
                step()
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
    return min(peaks)
