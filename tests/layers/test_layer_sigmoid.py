"""kSigmoid: 1/(1+e^−x), gradient g·y(1−y)."""

import warnings

import numpy as np
import pytest
from singa_builtins.layers.sigmoid import SigmoidLayer

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


def test_forward_backward_formulas():
    assert SigmoidLayer.type_names == ("kSigmoid",)
    rng = np.random.default_rng(0)
    src = SourceLayer(rng.standard_normal((5, 3)) * 3)
    layer = build(SigmoidLayer, 'name: "s"', [src])
    layer.forward(kTrain | kForward, [src])
    x = src.data.astype(np.float64)
    y = 1 / (1 + np.exp(-x))
    np.testing.assert_allclose(layer.data, y, rtol=1e-6, atol=1e-7)
    g = rng.standard_normal(x.shape)
    layer.grad[...] = g
    layer.backward(kTrain | kBackward, [src])
    np.testing.assert_allclose(src.grad, g * y * (1 - y), rtol=1e-5, atol=1e-7)


def test_extreme_inputs_saturate_without_warnings():
    src = SourceLayer(np.array([[-1000.0, -90.0, 0.0, 90.0, 1000.0]]))
    layer = build(SigmoidLayer, 'name: "s"', [src])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        layer.forward(kTrain | kForward, [src])
    np.testing.assert_allclose(layer.data, [[0.0, 0.0, 0.5, 1.0, 1.0]], atol=1e-30)


def test_gradient_check():
    src = SourceLayer(np.random.default_rng(1).standard_normal((4, 2, 3)) * 2)
    layer = build(SigmoidLayer, 'name: "s"', [src])
    GradientChecker(stepsize=1e-2, threshold=1e-3).check(layer, [src])


def test_wrong_number_of_sources():
    a = SourceLayer(np.zeros((1, 1)))
    with pytest.raises(SingaError, match="source"):
        SigmoidLayer(layer_conf('name: "s"'), make_ctx()).setup([a, a])


def test_no_allocation_per_step():
    src = SourceLayer(np.ones((64, 2000)))
    layer = build(SigmoidLayer, 'name: "s"', [src])

    def step():
        layer.forward(kTrain | kForward, [src])
        layer.backward(kTrain | kBackward, [src])

    assert peak_bytes(step) < 4_000


def _case(tmp_path):
    src = SourceLayer(np.random.default_rng(1).standard_normal((4, 2, 3)) * 2)
    return GradCase(build(SigmoidLayer, 'name: "s"', [src]), [src])


GRADIENT_CASES = {"kSigmoid": _case}
