"""kPooling: the mshadow type (square window from ``kernel`` or the ``_x`` fields), with
the gradient routed to the first maximum (0.3 sent it to every tied maximum)."""

import numpy as np
from singa_builtins.layers.pooling import PoolingLayer

from singa_core.layer import kBackward, kForward, kTrain
from singa_core.testing import GradCase, GradientChecker, SourceLayer, build
from tests.layers.spatial_reference import pool_forward_backward
from tests.layers.test_layer_cpooling import both_paths, pool_path  # noqa: F401 (fixture)


def pool(srcs, pool_conf):
    return build(PoolingLayer, f'name: "pool" pooling_conf {{ {pool_conf} }}', srcs)


def test_registered_name():
    assert PoolingLayer.type_names == ("kPooling",)


def test_square_window_from_x_fields():
    src = SourceLayer(np.zeros((2, 3, 13, 13)))
    layer = pool([src], "kernel_x: 3 kernel_y: 5 stride_x: 2 stride_y: 1")
    assert layer.data.shape == (2, 3, 6, 6)


def test_max_ties_route_to_one_input():
    src = SourceLayer(np.zeros((1, 2, 6, 6)))
    layer = pool([src], "pool: MAX kernel: 3 stride: 3")
    layer.forward(kTrain | kForward, [src])
    layer.grad[...] = 1.0
    layer.backward(kTrain | kBackward, [src])
    assert src.grad.sum() == layer.grad.sum() == 8.0


def test_against_reference():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 11, 11)).astype(np.float32)
    for method in ("MAX", "AVG"):
        src = SourceLayer(x)
        layer = pool([src], f"pool: {method} kernel: 3 stride: 2")
        layer.forward(kTrain | kForward, [src])
        g = rng.standard_normal(layer.data.shape)
        layer.grad[...] = g
        layer.backward(kTrain | kBackward, [src])
        y, gx = pool_forward_backward(x, g, method, 3, 3, 0, 0, 2, 2)
        np.testing.assert_allclose(layer.data, y, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(src.grad, gx, rtol=1e-6, atol=1e-6)


def _cases(tmp_path):
    x = np.random.default_rng(3).permutation(2 * 3 * 8 * 8).reshape(2, 3, 8, 8) * 0.01
    checker = GradientChecker(stepsize=1e-3, threshold=1e-3)
    cases = []
    for _ in both_paths():
        for method in ("MAX", "AVG"):
            src = SourceLayer(x)
            layer = pool([src], f"pool: {method} kernel: 2 stride: 2")
            cases.append(GradCase(layer, [src], checker))
    return cases


GRADIENT_CASES = {"kPooling": _cases}
