"""kConvolution: the mshadow type uses one square window (``kernel`` or the ``_x``
fields for both axes); otherwise the same computation as kCConvolution."""

import numpy as np
from singa_builtins.layers.convolution import ConvolutionLayer

from singa_core.layer import kBackward, kForward, kTrain
from singa_core.testing import GradCase, SourceLayer, build
from tests.layers.spatial_reference import conv_backward, conv_forward, strided_source

PARAMS = 'param { name: "w" } param { name: "b" }'


def conv(srcs, conv_conf):
    return build(
        ConvolutionLayer, f'name: "conv" convolution_conf {{ {conv_conf} }} {PARAMS}', srcs
    )


def test_registered_name():
    assert ConvolutionLayer.type_names == ("kConvolution",)


def test_y_fields_are_ignored_square_window_from_x():
    src = SourceLayer(np.zeros((2, 3, 11, 11)))
    layer = conv([src], "num_filters: 4 kernel_x: 3 kernel_y: 5 pad_x: 1 pad_y: 0 stride_x: 2")
    assert layer.params[0].shape == (4, 27)  # 3·3·3: kernel_y ignored
    assert layer.data.shape == (2, 4, 6, 6)  # (11 + 2 - 3) // 2 + 1 on both axes


def test_kernel_overrides_x_fields():
    src = SourceLayer(np.zeros((2, 1, 9, 9)))
    layer = conv([src], "num_filters: 2 kernel: 5 kernel_x: 3 pad: 2")
    assert layer.params[0].shape == (2, 25) and layer.data.shape == (2, 2, 9, 9)


def test_forward_backward_against_reference():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 2, 8, 8)).astype(np.float32)
    src = SourceLayer(x)
    layer = conv([src], "num_filters: 3 kernel: 3 pad: 1 stride: 2")
    layer.forward(kTrain | kForward, [src])
    w, b = (p.value.astype(np.float64) for p in layer.params)
    geom = (3, 3, 1, 1, 2, 2)
    np.testing.assert_allclose(layer.data, conv_forward(x, w, b, *geom), rtol=1e-4, atol=1e-4)
    g = rng.standard_normal(layer.data.shape)
    layer.grad[...] = g
    layer.backward(kTrain | kBackward, [src])
    gx, gw, gb = conv_backward(x, w, g, *geom)
    np.testing.assert_allclose(src.grad, gx, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(layer.params[0].grad, gw, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(layer.params[1].grad, gb, rtol=1e-4, atol=1e-4)


def _cases(tmp_path):
    x = np.random.default_rng(8).standard_normal((2, 3, 7, 7))
    cases = []
    for text in ("num_filters: 2 kernel: 3", "num_filters: 3 kernel: 5 pad: 2 stride: 2"):
        src = SourceLayer(x)
        cases.append(GradCase(conv([src], text), [src]))
    strided = strided_source(x)
    cases.append(GradCase(conv([strided], "num_filters: 2 kernel: 3 pad: 1"), [strided]))
    return cases


GRADIENT_CASES = {"kConvolution": _cases}
