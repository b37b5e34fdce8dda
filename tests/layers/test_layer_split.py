"""kSplit: shares the source's data; one gradient buffer per consumer, summed backward."""

import numpy as np
import pytest
from singa_builtins.layers.split import SplitLayer

from singa_core.errors import SingaError
from singa_core.layer import Layer, kBackward, kForward, kTrain
from singa_core.testing import (
    GradCase,
    GradientChecker,
    SourceLayer,
    build,
    layer_conf,
    make_ctx,
    peak_bytes,
)


def consumers(n):
    return [Layer(layer_conf(name=f"c{i}")) for i in range(n)]


def test_data_is_shared_and_grads_are_summed():
    assert SplitLayer.type_names == ("kSplit",)
    rng = np.random.default_rng(0)
    src = SourceLayer(rng.standard_normal((10, 20)))
    layer = build(SplitLayer, 'name: "s" split_conf { num_splits: 5 }', [src])
    layer.forward(kTrain | kForward, [src])
    assert layer.data is src.data and layer.shape == (10, 20)
    cs = consumers(5)
    bufs = [layer.grad_for(c) for c in cs]
    assert len({id(b) for b in bufs}) == 5 and bufs[0] is layer.grad
    assert all(layer.grad_for(c) is b for c, b in zip(cs, bufs, strict=True))  # stable
    gs = [rng.standard_normal((10, 20)).astype(np.float32) for _ in cs]
    for b, g in zip(bufs, gs, strict=True):
        b[...] = g
    layer.backward(kTrain | kBackward, [src])
    np.testing.assert_allclose(src.grad, sum(g.astype(np.float64) for g in gs), rtol=1e-5)


def test_buffers_follow_order_of_first_access():
    src = SourceLayer(np.zeros((2, 2)))
    layer = build(SplitLayer, 'name: "s" split_conf { num_splits: 2 }', [src])
    a, b = consumers(2)
    assert layer.grad_for(b) is layer.grads[0]
    assert layer.grad_for(a) is layer.grads[1]


def test_unused_and_single_consumers():
    src = SourceLayer(np.ones((2, 2)))
    layer = build(SplitLayer, 'name: "s" split_conf { num_splits: 3 }', [src])
    src.grad[...] = 9.0
    layer.backward(kTrain | kBackward, [src])  # nobody asked for a buffer: zero gradient
    assert (src.grad == 0).all()
    (c,) = consumers(1)
    layer.grad_for(c)[...] = 2.0
    layer.backward(kTrain | kBackward, [src])
    assert (src.grad == 2.0).all()


def test_gradient_check():
    rng = np.random.default_rng(1)
    src = SourceLayer(rng.standard_normal((3, 4)))
    layer = build(SplitLayer, 'name: "s" split_conf { num_splits: 3 }', [src])
    cs = consumers(3)
    GradientChecker().check(
        layer, [src], tops=lambda lay: [(lambda: lay.data, lay.grad_for(c)) for c in cs]
    )


def test_errors():
    ctx = make_ctx(locate=lambda field=None: f"job.conf:{field}")
    src = SourceLayer(np.zeros((2, 2)))
    with pytest.raises(SingaError, match="num_splits") as exc:
        SplitLayer(layer_conf('name: "s" split_conf { num_splits: 0 }'), ctx).setup([src])
    assert exc.value.where == "job.conf:split_conf.num_splits"
    with pytest.raises(SingaError, match="source"):
        SplitLayer(layer_conf('name: "s"'), ctx).setup([src, src])
    layer = SplitLayer(layer_conf('name: "s" split_conf { num_splits: 2 }'), ctx)
    layer.setup([src])
    a, b, c = consumers(3)
    layer.grad_for(a), layer.grad_for(b)
    with pytest.raises(SingaError, match="consumer number 3"):
        layer.grad_for(c)


def test_no_allocation_per_step():
    src = SourceLayer(np.ones((64, 2000)))
    layer = build(SplitLayer, 'name: "s" split_conf { num_splits: 3 }', [src])
    for c in consumers(3):
        layer.grad_for(c)

    def step():
        layer.forward(kTrain | kForward, [src])
        layer.backward(kTrain | kBackward, [src])

    assert peak_bytes(step) < 2_000


def _case(tmp_path):
    src = SourceLayer(np.random.default_rng(1).standard_normal((3, 4)))
    layer = build(SplitLayer, 'name: "s" split_conf { num_splits: 3 }', [src])
    cs = consumers(3)
    return GradCase(
        layer, [src], tops=lambda lay: [(lambda: lay.data, lay.grad_for(c)) for c in cs]
    )


GRADIENT_CASES = {"kSplit": _case}
