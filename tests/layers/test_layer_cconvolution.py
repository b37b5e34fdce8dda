"""kCConvolution (and the kCudnnConv alias): shapes, formulas against a loop reference,
both memory layouts of the source, gradient checks, errors, no per-step allocation."""

import numpy as np
import pytest
from singa_builtins.layers.cconvolution import CConvolutionLayer

from singa_core.errors import SingaError
from singa_core.layer import kBackward, kForward, kTrain
from singa_core.testing import GradCase, GradientChecker, SourceLayer, build, layer_conf, make_ctx
from tests.layers.spatial_reference import conv_backward, conv_forward, strided_source

PARAMS = 'param { name: "w" } param { name: "b" }'


def conv(srcs, conv_conf, **kw):
    return build(
        CConvolutionLayer, f'name: "conv" convolution_conf {{ {conv_conf} }} {PARAMS}', srcs, **kw
    )


GEOMETRIES = [
    # conv_conf, (kh, kw, ph, pw, sh, sw)
    ("num_filters: 4 kernel: 3", (3, 3, 0, 0, 1, 1)),
    ("num_filters: 3 kernel: 5 pad: 2", (5, 5, 2, 2, 1, 1)),
    # "same" padding and 2·C > F: the transposed input gradient (in the input's buffer
    # where the shapes agree, F = C)
    ("num_filters: 2 kernel: 3 pad: 1", (3, 3, 1, 1, 1, 1)),
    ("num_filters: 3 kernel_x: 3 kernel_y: 5 pad_x: 1 pad_y: 2", (5, 3, 2, 1, 1, 1)),
    ("num_filters: 2 kernel: 3 stride: 2 pad: 1", (3, 3, 1, 1, 2, 2)),
    (
        "num_filters: 4 kernel_x: 3 kernel_y: 2 pad_x: 1 pad_y: 2 stride_x: 2 stride_y: 1",
        (2, 3, 2, 1, 1, 2),
    ),
]


@pytest.fixture(params=["rows", "im2col"])
def conv_path(request, monkeypatch):
    """Both implementations: row columns (vertical stride 1, any C·kw) and full im2col."""
    from singa_builtins.layers import _conv

    monkeypatch.setattr(_conv, "ROW_COLUMNS_MIN_K", 0 if request.param == "rows" else 10**9)
    return request.param


def test_registered_names():
    assert CConvolutionLayer.type_names == ("kCConvolution", "kCudnnConv")


def test_lenet_shapes_and_params():
    src = SourceLayer(np.zeros((64, 1, 28, 28)))
    c1 = conv([src], "num_filters: 20 kernel: 5 stride: 1")
    assert c1.data.shape == (64, 20, 24, 24) and c1.grad.shape == c1.data.shape
    w, b = c1.params
    assert w.shape == (20, 25) and b.shape == (20,)  # (F, C·kh·kw): fan_in = 25
    c2 = conv([c1], "num_filters: 50 kernel: 5")
    assert c2.data.shape == (64, 50, 20, 20) and c2.params[0].shape == (50, 500)


def test_cifar_shapes_floor_rule():
    src = SourceLayer(np.zeros((2, 3, 32, 32)))
    c = conv([src], "num_filters: 32 kernel: 5 stride: 1 pad: 2")
    assert c.data.shape == (2, 32, 32, 32)
    c = conv([src], "num_filters: 8 kernel: 4 stride: 3")  # (32 - 4) // 3 + 1 = 10
    assert c.data.shape == (2, 8, 10, 10)


def test_three_d_source_is_one_channel():
    src = SourceLayer(np.random.default_rng(0).standard_normal((2, 6, 5)))
    c = conv([src], "num_filters: 2 kernel: 3")
    assert c.data.shape == (2, 2, 4, 3) and c.params[0].shape == (2, 9)
    GradientChecker().check(c, [src])


def check_against_reference(layer, src, x, geom, rng):
    """One forward and one backward of ``layer`` on ``x`` against the loop reference: the
    output and both Params' gradients; returns (the output gradient used, the reference
    input gradient)."""
    layer.forward(kTrain | kForward, [src])
    w, b = (p.value.astype(np.float64) for p in layer.params)
    np.testing.assert_allclose(layer.data, conv_forward(x, w, b, *geom), rtol=1e-4, atol=1e-4)
    g = rng.standard_normal(layer.data.shape)
    layer.grad[...] = g
    layer.backward(kTrain | kBackward, [src])
    gx, gw, gb = conv_backward(x, w, g, *geom)
    np.testing.assert_allclose(layer.params[0].grad, gw, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(layer.params[1].grad, gb, rtol=1e-4, atol=1e-4)
    return g, gx


@pytest.mark.parametrize("strided", [False, True])
@pytest.mark.parametrize(("text", "geom"), GEOMETRIES)
def test_forward_backward_against_reference(text, geom, strided, conv_path):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 2, 7, 6)).astype(np.float32)
    src = strided_source(x) if strided else SourceLayer(x)
    layer = conv([src], text)
    assert layer._rows == (conv_path == "rows" and geom[4] == 1)
    g, gx = check_against_reference(layer, src, x, geom, rng)
    np.testing.assert_allclose(src.grad, gx, rtol=1e-4, atol=1e-4)
    # the row path reuses its column buffer for the input gradient: the next forward must
    # see zero padding again, and a second backward must give the same gradients
    y1 = layer.data.copy()
    layer.forward(kTrain | kForward, [src])
    np.testing.assert_array_equal(layer.data, y1)
    layer.grad[...] = g
    layer.backward(kTrain | kBackward, [src])
    np.testing.assert_allclose(src.grad, gx, rtol=1e-4, atol=1e-4)


def test_cifar_layers_pick_the_path_by_gemm_depth():
    c1 = conv([SourceLayer(np.zeros((2, 3, 32, 32)))], "num_filters: 32 kernel: 5 pad: 2")
    c2 = conv([c1], "num_filters: 32 kernel: 5 pad: 2")
    assert not c1._rows and c2._rows  # C·kw = 15 against 160


def test_output_is_a_batch_innermost_view():
    src = SourceLayer(np.zeros((4, 2, 6, 6)))
    layer = conv([src], "num_filters: 3 kernel: 3")
    assert layer.data.transpose(1, 2, 3, 0).flags.c_contiguous
    assert layer.grad.transpose(1, 2, 3, 0).flags.c_contiguous


def test_input_layer_source_takes_no_gradient():
    src = SourceLayer(np.ones((2, 1, 5, 5)), grad=False)  # like a data layer
    layer = conv([src], "num_filters: 2 kernel: 3")
    layer.forward(kTrain | kForward, [src])
    layer.grad[...] = 1.0
    layer.backward(kTrain | kBackward, [src])
    assert np.isfinite(layer.params[0].grad).all()


def test_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    x = rng.standard_normal((5, 3, 12, 11)).astype(np.float32)
    src = SourceLayer(x)
    layer = conv([src], "num_filters: 6 kernel_y: 5 kernel_x: 3 pad_y: 2 pad_x: 1 stride_x: 2")
    layer.forward(kTrain | kForward, [src])
    g = rng.standard_normal(layer.data.shape).astype(np.float32)
    layer.grad[...] = g
    layer.backward(kTrain | kBackward, [src])
    xt = torch.tensor(x, requires_grad=True)
    wt = torch.tensor(layer.params[0].value.reshape(6, 3, 5, 3), requires_grad=True)
    bt = torch.tensor(layer.params[1].value, requires_grad=True)
    y = torch.nn.functional.conv2d(xt, wt, bt, stride=(1, 2), padding=(2, 1))
    y.backward(torch.tensor(g))
    np.testing.assert_allclose(layer.data, y.detach().numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(src.grad, xt.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(
        layer.params[0].grad, wt.grad.numpy().reshape(6, -1), rtol=1e-4, atol=1e-3
    )


def locating_ctx():
    return make_ctx(locate=lambda field=None: f"job.conf:{field}")


@pytest.mark.parametrize(
    ("text", "match"),
    [
        (f'name: "c" {PARAMS}', "num_filters"),
        (f'name: "c" convolution_conf {{ kernel: 3 }} {PARAMS}', "num_filters"),
        (f'name: "c" convolution_conf {{ num_filters: 0 }} {PARAMS}', "positive"),
        (f'name: "c" convolution_conf {{ num_filters: 2 stride: 0 }} {PARAMS}', "stride"),
        (f'name: "c" convolution_conf {{ num_filters: 2 kernel: 9 }} {PARAMS}', "does not fit"),
        ('name: "c" convolution_conf { num_filters: 2 } param { name: "w" }', "bias"),
    ],
)
def test_config_errors(text, match):
    src = SourceLayer(np.zeros((2, 1, 5, 5)))
    layer = CConvolutionLayer(layer_conf(text), locating_ctx())
    with pytest.raises(SingaError, match=match) as exc:
        layer.setup([src])
    assert exc.value.where is not None


def test_source_must_be_spatial():
    src = SourceLayer(np.zeros((2, 10)))
    layer = CConvolutionLayer(
        layer_conf(f'name: "c" convolution_conf {{ num_filters: 2 }} {PARAMS}'), locating_ctx()
    )
    with pytest.raises(SingaError, match="height, width") as exc:
        layer.setup([src])
    assert exc.value.where == "job.conf:srclayers"


@pytest.mark.parametrize("layout", ["nchw", "batch-innermost"])
def test_no_allocation_per_step(conv_path, layout):
    from singa_core.testing import peak_bytes

    x = np.random.default_rng(0).standard_normal((64, 4, 12, 12))
    src = SourceLayer(x) if layout == "nchw" else strided_source(x)
    layer = conv([src], "num_filters: 6 kernel: 3 pad: 1")
    # the transposed input gradient is set up (and taken where the source gradient is CHWN)
    assert (layer._rows and layer._grad_rows is not None) == (conv_path == "rows")

    def step():
        layer.forward(kTrain | kForward, [src])
        layer.backward(kTrain | kBackward, [src])

    # the output alone is 64·6·12·12 floats = 221 KB and the column buffer 1.3 MB; what
    # remains is numpy's fixed-size ufunc iteration buffer for strided adds (~84 KB)
    assert peak_bytes(step) < 100_000


def _cases(tmp_path):
    from singa_builtins.layers import _conv

    cases = []
    rng = np.random.default_rng(7)
    default = _conv.ROW_COLUMNS_MIN_K
    try:
        for min_k in (0, 10**9):  # both implementations: row columns and full im2col
            _conv.ROW_COLUMNS_MIN_K = min_k
            for text, _ in GEOMETRIES:
                x = rng.standard_normal((2, 2, 6, 5))
                for src in (SourceLayer(x), strided_source(x)):
                    cases.append(GradCase(conv([src], text), [src]))
        # a source without a gradient, its matrix unfolded a block at a time (_conv_blocks)
        from singa_builtins.layers import _conv_blocks

        if _conv_blocks.available():
            _conv.ROW_COLUMNS_MIN_K = 10**9
            pays, _conv_blocks.pays = _conv_blocks.pays, lambda rows, cols: True
            try:
                for text, _ in GEOMETRIES[:3]:
                    src = SourceLayer(rng.standard_normal((2, 2, 6, 5)), grad=False)
                    layer = conv([src], text)
                    assert layer._blocks is not None or layer._one_launch  # a device: no blocks
                    cases.append(GradCase(layer, [src]))
            finally:
                _conv_blocks.pays = pays
    finally:
        _conv.ROW_COLUMNS_MIN_K = default
    return cases


GRADIENT_CASES = {"kCConvolution": _cases}
