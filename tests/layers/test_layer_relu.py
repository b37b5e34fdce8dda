"""kReLU: max(0, x), gradient g·[y > 0]; negative_slope ignored as in 0.3."""

import numpy as np
import pytest
from singa_builtins.layers.relu import ReLULayer

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
    assert ReLULayer.type_names == ("kReLU",)
    rng = np.random.default_rng(0)
    src = SourceLayer(rng.standard_normal((4, 5)))
    layer = build(ReLULayer, 'name: "r"', [src])
    layer.forward(kTrain | kForward, [src])
    np.testing.assert_array_equal(layer.data, np.maximum(src.data, 0))
    g = rng.standard_normal((4, 5)).astype(np.float32)
    layer.grad[...] = g
    layer.backward(kTrain | kBackward, [src])
    np.testing.assert_array_equal(src.grad, np.where(src.data > 0, g, 0))


def test_negative_slope_is_ignored():
    src = SourceLayer(np.array([[-2.0, 3.0]]))
    layer = build(ReLULayer, 'name: "r" relu_conf { negative_slope: 0.1 }', [src])
    layer.forward(kTrain | kForward, [src])
    np.testing.assert_array_equal(layer.data, [[0.0, 3.0]])


def test_gradient_check_skips_the_kink():
    src = SourceLayer(np.random.default_rng(2).standard_normal((5, 6)))
    src.data[0, :3] = [0.0, 0.004, -0.003]  # near the kink: skipped like Caffe's kink_range
    report = GradientChecker(stepsize=1e-2, threshold=1e-3, kink=0.0, kink_range=0.01).check(
        build(ReLULayer, 'name: "r"', [src]), [src]
    )
    assert report.skipped_kinks == 3


def test_wrong_number_of_sources():
    with pytest.raises(SingaError, match="source"):
        ReLULayer(layer_conf('name: "r"'), make_ctx()).setup([])


def test_no_allocation_per_step():
    src = SourceLayer(np.ones((64, 2000)))
    layer = build(ReLULayer, 'name: "r"', [src])

    def step():
        layer.forward(kTrain | kForward, [src])
        layer.backward(kTrain | kBackward, [src])

    # arrays are 512 KB; g·mask (float32 × bool) uses numpy's transient casting buffer of at
    # most 8192 elements, which is faster than casting-free alternatives
    assert peak_bytes(step) < 40_000


def _case(tmp_path):
    src = SourceLayer(np.random.default_rng(2).standard_normal((5, 6)))
    checker = GradientChecker(stepsize=1e-2, threshold=1e-3, kink=0.0, kink_range=0.01)
    return GradCase(build(ReLULayer, 'name: "r"', [src]), [src], checker)


GRADIENT_CASES = {"kReLU": _case}
