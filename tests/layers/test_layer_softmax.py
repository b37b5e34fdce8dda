"""kSoftmax (kCudnnSoftmax): row-wise softmax; backward y⊙(g − Σ g⊙y) (0.3 had none)."""

import numpy as np
import pytest
from singa_builtins.layers.softmax import SoftmaxLayer

from singa_core.errors import SingaError
from singa_core.layer import kBackward, kForward, kTrain
from singa_core.testing import (
    GradCase,
    GradientChecker,
    SourceLayer,
    build,
    layer_conf,
    make_ctx,
    peak_bytes,
)


def softmax(x):
    x = x.reshape(len(x), -1).astype(np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_forward_backward_formulas():
    assert SoftmaxLayer.type_names == ("kSoftmax", "kCudnnSoftmax")
    rng = np.random.default_rng(0)
    src = SourceLayer(rng.standard_normal((4, 2, 3)) * 3)
    layer = build(SoftmaxLayer, 'name: "sm"', [src])
    assert layer.shape == (4, 6) and layer.params == []
    layer.forward(kTrain | kForward, [src])
    y = softmax(src.data)
    np.testing.assert_allclose(layer.data, y, rtol=1e-5)
    np.testing.assert_allclose(layer.data.sum(axis=1), 1.0, rtol=1e-6)
    g = rng.standard_normal((4, 6))
    layer.grad[...] = g
    layer.backward(kTrain | kBackward, [src])
    want = y * (g - (g * y).sum(axis=1, keepdims=True))
    np.testing.assert_allclose(src.grad.reshape(4, 6), want, rtol=1e-4, atol=1e-6)


def test_large_values_do_not_overflow():
    src = SourceLayer([[1000.0, 1000.0, -1000.0], [-1e4, 0.0, 1e4]])
    layer = build(SoftmaxLayer, 'name: "sm"', [src])
    layer.forward(kTrain | kForward, [src])
    np.testing.assert_allclose(layer.data, [[0.5, 0.5, 0.0], [0.0, 0.0, 1.0]])


def test_strided_source_and_gradient_buffer():
    rng = np.random.default_rng(3)
    base = rng.standard_normal((5, 4)).astype(np.float32)
    src = SourceLayer(base)
    src.data = base.T.copy().T  # a non-contiguous (Fortran-ordered) array
    src.grad = np.zeros((4, 5), dtype=np.float32).T
    assert not src.data.flags.c_contiguous and not src.grad.flags.c_contiguous
    layer = build(SoftmaxLayer, 'name: "sm"', [src])
    layer.forward(kTrain | kForward, [src])
    np.testing.assert_allclose(layer.data, softmax(base), rtol=1e-5)
    g = rng.standard_normal((5, 4))
    layer.grad[...] = g
    layer.backward(kTrain | kBackward, [src])
    y = softmax(base)
    np.testing.assert_allclose(src.grad, y * (g - (g * y).sum(1, keepdims=True)), atol=1e-6)


def test_errors():
    with pytest.raises(SingaError, match="source"):
        SoftmaxLayer(layer_conf('name: "sm"'), make_ctx()).setup([])


def test_no_allocation_per_step():
    src = SourceLayer(np.ones((64, 1000)))
    layer = build(SoftmaxLayer, 'name: "sm"', [src])

    def step():
        layer.forward(kTrain | kForward, [src])
        layer.backward(kTrain | kBackward, [src])

    # arrays are 256 KB; row reductions/broadcasts use numpy's transient buffer (≤ 8192 items)
    assert peak_bytes(step) < 40_000


def _case(tmp_path):
    src = SourceLayer(np.random.default_rng(4).standard_normal((3, 5)))
    checker = GradientChecker(stepsize=1e-2, threshold=1e-3)
    return GradCase(build(SoftmaxLayer, 'name: "sm"', [src]), [src], checker)


GRADIENT_CASES = {"kSoftmax": _case}
