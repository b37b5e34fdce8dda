"""kSTanh: 1.7159047·tanh(0.66666667·x) and its output-based gradient."""

import numpy as np
import pytest
from singa_builtins.layers.stanh import STANH_A, STANH_B, STanhLayer

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


def test_constants_are_singas():
    assert STanhLayer.type_names == ("kSTanh",)
    assert (STANH_A, STANH_B) == (1.7159047, 0.66666667)


def test_forward_backward_formulas():
    rng = np.random.default_rng(0)
    src = SourceLayer(rng.standard_normal((3, 2, 4)) * 2)
    layer = build(STanhLayer, 'name: "t"', [src])
    assert layer.data.shape == (3, 2, 4) and layer.params == []
    layer.forward(kTrain | kForward, [src])
    x = src.data.astype(np.float64)
    y = 1.7159047 * np.tanh(0.66666667 * x)
    np.testing.assert_allclose(layer.data, y, rtol=1e-6, atol=1e-6)
    g = rng.standard_normal(x.shape)
    layer.grad[...] = g
    layer.backward(kTrain | kBackward, [src])
    gx = g * 1.7159047 * 0.66666667 * (1 - np.tanh(0.66666667 * x) ** 2)
    np.testing.assert_allclose(src.grad, gx, rtol=1e-5, atol=1e-6)


def test_gradient_check():
    src = SourceLayer(np.random.default_rng(1).standard_normal((4, 6)) * 2)
    layer = build(STanhLayer, 'name: "t"', [src])
    GradientChecker(stepsize=1e-2, threshold=1e-3).check(layer, [src])


def test_wrong_number_of_sources():
    with pytest.raises(SingaError, match="source"):
        STanhLayer(layer_conf('name: "t"'), make_ctx()).setup([])


def test_no_allocation_per_step():
    src = SourceLayer(np.ones((64, 2000)))
    layer = build(STanhLayer, 'name: "t"', [src])

    def step():
        layer.forward(kTrain | kForward, [src])
        layer.backward(kTrain | kBackward, [src])

    assert peak_bytes(step) < 4_000


def _case(tmp_path):
    src = SourceLayer(np.random.default_rng(1).standard_normal((4, 6)) * 2)
    return GradCase(build(STanhLayer, 'name: "t"', [src]), [src])


GRADIENT_CASES = {"kSTanh": _case}
