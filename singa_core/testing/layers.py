"""Contract checks for layer plugins: one call per layer type.

:func:`check_layer` builds the layer from a text ``LayerProto`` over random sources and checks
everything the net relies on (see CONTRIBUTING.md, "Testing a plugin"):

* set-up: ``data`` (and ``grad``) allocated as float32 of the expected shape, every Param's
  ``value`` and ``grad`` of one shape, Param names distinct;
* forward/backward against central differences (:class:`GradientChecker`), with plain
  (C-contiguous) sources and again with batch-innermost strided sources, whose output must
  equal the plain one (unless the layer is random: its samples may follow memory order);
* ``kAggGrad``: with that phase flag the Param gradients are *added* into ``p.grad``;
  without it they are written over it;
* a checkpoint round trip of the Params through SINGA's checkpoint format restores the same
  output (the Params are the layer's whole learnable state), and ``state_dict()`` is JSON;
* determinism: two layers built with the same seed compute the same output, and repeating
  forward/backward with the generator re-seeded gives bit-identical results.

:func:`check_layer_contract` runs the last three on a layer that is already set up (the
built-in layers' gradient cases call it through :class:`GradCase`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from singa_core.contracts.device import to_host, using_device
from singa_core.contracts.layer import Layer, kAggGrad, kBackward, kForward, kTrain
from singa_core.running.checkpoint import ParamRecord, decode_params, encode_params
from singa_core.testing.gradcheck import (
    CheckReport,
    GradientChecker,
    SourceLayer,
    build,
    layer_conf,
    strided_source,
)

_SEED = 4242


@dataclass
class LayerReport:
    """What :func:`check_layer` checked (for a test to print or assert on)."""

    layer: Layer
    plain: CheckReport | None
    strided: CheckReport | None
    aggregated_params: int


def resolve(kind: str, type_or_name):
    """A registered type by name (``"kFoo"``) from the installed plugins, or the class."""
    if isinstance(type_or_name, str):
        from singa_core.plugin_host.host import get_host

        return get_host().get(kind, type_or_name)
    return type_or_name


def _outputs(layer: Layer, tops) -> list[tuple[Callable[[], np.ndarray], np.ndarray | None]]:
    if tops is not None:
        return tops(layer)
    return [(lambda: layer.data, layer.grad)]


def _run(layer, srcs, phase, tops, weights, backward: bool, agg: bool = False):
    """Forward (and backward with output gradients ``weights``) with a re-seeded
    generator; returns copies of the outputs, the Param gradients and the source grads."""
    layer.ctx.rng = np.random.default_rng(_SEED)
    layer.forward(phase | kForward, srcs)
    outs = [np.array(to_host(get())) for get, _ in _outputs(layer, tops)]
    pgrads, sgrads = [], []
    if backward:
        if not getattr(layer, "is_loss", False):
            for (_, buf), w in zip(_outputs(layer, tops), weights, strict=True):
                if buf is not None:
                    buf[...] = layer.device.asarray(w)
        layer.ctx.rng = np.random.default_rng(_SEED + 1)
        layer.backward(phase | kBackward | (kAggGrad if agg else 0), srcs)
        pgrads = [np.array(to_host(p.grad)) for p in layer.params]
        sgrads = [
            None if s.grad_for(layer) is None else np.array(to_host(s.grad_for(layer)))
            for s in srcs
        ]
    layer.pop_metrics()
    return outs, pgrads, sgrads


def _same(a, b, what: str, name: str) -> None:
    if a is None or b is None:
        assert a is None and b is None, f"'{name}': {what} present in only one run"
        return
    np.testing.assert_array_equal(a, b, err_msg=f"'{name}': {what} differs between two runs")


def check_layer_contract(
    layer: Layer,
    srcs: Sequence[Layer],
    *,
    phase: int = kTrain,
    tops=None,
    backward: bool = True,
) -> int:
    """Check ``kAggGrad`` accumulation, the Params' checkpoint round trip and
    repeatability on a set-up layer; returns how many Param gradients were checked for
    accumulation. ``backward=False`` for layers that take no part in backpropagation."""
    srcs = list(srcs)
    name = layer.name
    rng = np.random.default_rng(7)
    weights = [
        None if buf is None else rng.standard_normal(buf.shape).astype(np.float32)
        for _, buf in _outputs(layer, tops)
    ]
    saved_state = layer.state_dict()
    json.dumps(saved_state)  # checkpoints store it as JSON

    def again(**kw):
        layer.load_state_dict(saved_state)  # input layers: read the same batch again
        layer.reset_state()
        return _run(layer, srcs, phase, tops, weights, backward, **kw)

    # determinism: the same inputs and generator give bit-identical results
    outs1, pg1, sg1 = again()
    outs2, pg2, sg2 = again()
    for a, b in zip(outs1, outs2, strict=True):
        _same(a, b, "forward output", name)
    if backward:
        for p, a, b in zip(layer.params, pg1, pg2, strict=True):
            _same(a, b, f"gradient of {p.name}", name)
        for i, (a, b) in enumerate(zip(sg1, sg2, strict=True)):
            _same(a, b, f"gradient of source {i}", name)

    # kAggGrad: added into p.grad; without it, written over it
    checked = 0
    own = [p for p in layer.params if p.grad_owner is p and p.learnable]
    if backward and own:
        base = {id(p): rng.standard_normal(p.shape).astype(np.float32) for p in own}
        for p in own:
            p.grad[...] = p.device.asarray(base[id(p)])
        _, pg_agg, _ = again(agg=True)
        for p, g_plain, g_agg in zip(layer.params, pg1, pg_agg, strict=True):
            if p.grad_owner is not p or not p.learnable:
                continue  # layer-maintained state (running statistics) has no gradient
            np.testing.assert_allclose(
                g_agg,
                base[id(p)] + g_plain,
                rtol=1e-5,
                atol=1e-5,
                err_msg=f"'{name}': with kAggGrad the gradient of {p.name} must be added "
                "into p.grad (p.grad += g), not written over it",
            )
            checked += 1
        for p in own:
            p.grad[...] = np.nan
        _, pg_over, _ = again()
        for p, g_plain, g_over in zip(layer.params, pg1, pg_over, strict=True):
            if p.grad_owner is not p or not p.learnable:
                continue
            np.testing.assert_array_equal(
                g_over,
                g_plain,
                err_msg=f"'{name}': without kAggGrad backward must write p.grad of {p.name} "
                "over its old content",
            )

    # checkpoint round trip: the Params hold the whole learnable state
    if layer.params:
        owners = [p for p in layer.params if p.owner is p]
        records = [ParamRecord(p.name, max(p.version, 0), to_host(p.value)) for p in owners]
        decoded = {r.name: r for r in decode_params(encode_params(records), "<memory>")}
        assert set(decoded) == {p.name for p in owners}, "Param names lost in the checkpoint"
        originals = [np.array(to_host(p.value)) for p in owners]
        for p in owners:
            rec = decoded[p.name]
            assert tuple(rec.value.shape) == p.shape, (
                f"'{name}': {p.name} comes back from a checkpoint with shape "
                f"{tuple(rec.value.shape)}, not {p.shape}"
            )
            np.testing.assert_array_equal(rec.value, to_host(p.value))
            forget = rng.standard_normal(p.shape).astype(np.float32)
            p.value[...] = p.device.asarray(forget)  # forget, then restore
        for p in owners:
            p.value[...] = p.device.asarray(decoded[p.name].value.reshape(p.shape))
        outs3, _, _ = again()
        for a, b in zip(outs1, outs3, strict=True):
            _same(a, b, "forward output after restoring its Params from a checkpoint", name)
        for p, v in zip(owners, originals, strict=True):
            if p.learnable:  # the layer itself writes the others in forward
                np.testing.assert_array_equal(to_host(p.value), v)
    again()  # leave the outputs consistent with the inputs
    return checked


def _sources(srcs, strided: bool) -> list[Layer]:
    out = []
    for i, s in enumerate(srcs):
        if isinstance(s, SourceLayer):
            data, labels, grad = s.data, s.aux, s.grad is not None
            name = s.name
        elif isinstance(s, Layer):
            out.append(s)  # a caller-made source, used as is
            continue
        else:
            data, labels, grad, name = np.asarray(to_host(s), np.float32), None, True, f"src{i}"
        if strided and grad and data.ndim >= 2:
            src = strided_source(data, labels, name=name)
        else:
            src = SourceLayer(np.array(to_host(data)), labels, name=name, grad=grad)
        out.append(src)
    return out


def check_layer(
    layer_type,
    conf,
    srcs: Sequence,
    *,
    shape: Sequence[int] | None = None,
    checker: GradientChecker | None = None,
    seed: int = 0,
    param_std: float = 1.0,
    strided: bool = True,
    no_gradient: bool = False,
    tops=None,
    device=None,
) -> LayerReport:
    """Check a layer type's whole contract in one call.

    ``layer_type``: the class, or its registered name (``"kFoo"``, looked up among the
    installed plugins). ``conf``: LayerProto text (your extension as ``[pkg.ext] { ... }``;
    add ``param { name: ... }`` entries for its Params). ``srcs``: one array per source
    (batch on axis 0), or :class:`SourceLayer` objects (e.g. ``SourceLayer(labels=y,
    grad=False)`` for a loss layer's label source). ``shape``: the expected output shape.
    ``no_gradient=True`` for layers that take no part in backpropagation.
    ``device``: run every check with the layer and its sources on this device (a
    :class:`~singa_core.contracts.device.Device`, e.g. from
    :func:`singa_core.testing.check_devices`; default the CPU). A layer whose
    ``placement`` is not ``"device"`` is checked on the CPU, where it runs.
    Raises AssertionError naming what is wrong.
    """
    cls = resolve("layer", layer_type)
    if device is not None and getattr(cls, "placement", None) == "device":
        with using_device(device):
            return check_layer(
                layer_type, conf, srcs, shape=shape, checker=checker, seed=seed,
                param_std=param_std, strided=strided, no_gradient=no_gradient, tops=tops,
            )  # fmt: skip
    cls = resolve("layer", layer_type)
    if isinstance(conf, str):
        conf = layer_conf(conf)
    checker = checker or GradientChecker()

    # set-up and determinism across two builds with one seed
    layer_srcs = _sources(srcs, False)
    layer = build(cls, conf, layer_srcs, seed=seed, param_std=param_std)
    twin_srcs = _sources(srcs, False)
    twin = build(cls, conf, twin_srcs, seed=seed, param_std=param_std)
    assert layer.data is not None, f"setup of '{layer.name}' did not allocate data"
    assert layer.data.dtype == np.float32, f"'{layer.name}': data must be float32"
    if shape is not None:
        assert tuple(layer.data.shape) == tuple(shape), (
            f"'{layer.name}': output shape {tuple(layer.data.shape)} after setup, "
            f"expected {tuple(shape)}"
        )
    if layer.grad is not None:
        assert layer.grad.shape == layer.data.shape, f"'{layer.name}': grad shape != data shape"
    names = [p.name for p in layer.params]
    assert len(set(names)) == len(names), f"'{layer.name}': two Params named alike: {names}"
    for p in layer.params:
        assert p.value.shape == p.grad.shape == p.shape, f"'{layer.name}': {p.name} shapes"
        assert p.value.dtype == np.float32, f"'{layer.name}': {p.name} must be float32"
    layer.forward(kTrain | kForward, layer_srcs)
    twin.forward(kTrain | kForward, twin_srcs)
    np.testing.assert_array_equal(
        to_host(layer.data),
        to_host(twin.data),
        err_msg=f"'{layer.name}': two layers built with one seed differ",
    )

    plain = None
    if not no_gradient:
        plain = checker.check(layer, layer_srcs, tops=tops)
    aggregated = check_layer_contract(
        layer, layer_srcs, phase=checker.phase, tops=tops, backward=not no_gradient
    )

    strided_report = None
    if strided and any((s.data if isinstance(s, Layer) else np.asarray(s)).ndim >= 2 for s in srcs):
        st_srcs = _sources(srcs, True)
        st = build(cls, conf, st_srcs, seed=seed, param_std=param_std)
        for p, q in zip(st.params, layer.params, strict=True):
            p.value[...] = q.value
        outs = []
        for lay, ss, seed in (
            (layer, layer_srcs, _SEED + 5),
            (layer, layer_srcs, _SEED),
            (st, st_srcs, _SEED),
        ):
            lay.ctx.rng = np.random.default_rng(seed)
            lay.forward(kTrain | kForward, ss)
            outs.append(np.array(to_host(lay.data)))
        # a random layer (dropout) may draw its samples in memory order: compare outputs
        # only for layers whose output does not depend on the generator
        if np.array_equal(outs[0], outs[1]):
            np.testing.assert_allclose(
                outs[2],
                outs[1],
                rtol=1e-5,
                atol=1e-6,
                err_msg=f"'{layer.name}': output differs when the sources are "
                "batch-innermost (strided) arrays",
            )
        if not no_gradient:
            strided_report = checker.check(st, st_srcs, tops=tops)
    return LayerReport(layer, plain, strided_report, aggregated)


# -- the registry-wide gradient test's cases ---------------------------------------------
@dataclass
class GradCase:
    """How to gradient-check one layer type: a set-up layer, its sources and the checker.

    :meth:`run` compares gradients with central differences and then checks the rest of
    the layer contract on the same instance (:func:`singa_core.testing.layers.
    check_layer_contract`: ``kAggGrad`` accumulation, a checkpoint round trip of its
    Params, repeatable forward/backward under a re-seeded generator).

    The built-in layers' tests declare ``GRADIENT_CASES = {"kType": make_case, ...}``, where
    ``make_case(tmp_path)`` builds a small, set-up layer and returns a GradCase (or a list
    of them, e.g. one per configuration variant). Layers that take no
    part in backpropagation (input and output layers) return a case with ``no_gradient``
    set to the reason; the registry test then checks that they really give no gradient
    (every source's ``grad_for`` is None, or they have no sources) and run forward/backward.
    """

    layer: Layer
    srcs: list[Layer]
    checker: GradientChecker = field(default_factory=GradientChecker)
    check_srcs: Sequence[int] | None = None
    tops: Callable | None = None
    no_gradient: str | None = None
    contract: bool = True  # also run check_layer_contract after the gradient check

    def run(self) -> CheckReport | None:
        if self.no_gradient is not None:
            assert self.layer.params == [] or not getattr(self.layer, "is_loss", False)
            self.layer.forward(kTrain | kForward, self.srcs)
            self.layer.backward(kTrain | kBackward, self.srcs)
            for s in self.srcs:
                if s.grad is not None:
                    assert not np.isnan(to_host(s.grad)).any()
            report = None
        else:
            report = self.checker.check(
                self.layer, self.srcs, check_srcs=self.check_srcs, tops=self.tops
            )
        if self.contract:
            check_layer_contract(
                self.layer,
                self.srcs,
                phase=self.checker.phase,
                tops=self.tops,
                backward=self.no_gradient is None,
            )
        return report
