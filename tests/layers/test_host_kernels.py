"""The compiled host passes of ReLU's and LRN's kernels (``_host_kernels``, numba) give
exactly the arrays of the numpy passes they replace, in every memory layout."""

import numpy as np
import pytest
from singa_builtins.layers import lrn, relu
from singa_builtins.layers._host_kernels import kernels, memory_order

pytestmark = pytest.mark.skipif(
    pytest.importorskip("numba") is None or kernels() is None, reason="numba is off"
)

LAYOUTS = {
    "nchw": (lambda shape: shape, lambda a: a),
    "batch-innermost": (lambda s: (s[1], s[2], s[3], s[0]), lambda a: a.transpose(3, 0, 1, 2)),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("beta", [0.75, 0.5, 1.0, 0.6])
@pytest.mark.parametrize("n", [1, 3, 5])
def test_lrn_equals_numpy(layout, beta, n):
    memory, view = LAYOUTS[layout]
    shape = (7, 6, 4, 3)
    rng = np.random.default_rng(n)
    x, g = (view(rng.standard_normal(memory(shape)).astype(np.float32)) for _ in range(2))
    a, k, c = float(np.float32(0.3 / n)), 1.5, float(np.float32(0.6 * beta / n))
    got = {}
    for path, fwd, bwd in [
        ("numpy", lrn.lrn_forward_host, lrn.lrn_backward_host),
        ("compiled", lrn.lrn_forward_cpu, lrn.lrn_backward_cpu),
    ]:
        y, norm, powb, tmp, out = (view(np.empty(memory(shape), np.float32)) for _ in range(5))
        fwd(x, y, norm, powb, tmp, n // 2, a, k, beta)
        bwd(x, y, g, norm, powb, out, tmp, n // 2, c)
        got[path] = (y, norm, powb, out)
    for mine, theirs in zip(got["compiled"], got["numpy"], strict=True):
        np.testing.assert_array_equal(mine, theirs)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_relu_backward_equals_numpy(layout):
    memory, view = LAYOUTS[layout]
    shape = (5, 4, 3, 6)
    rng = np.random.default_rng(1)
    y, g = (view(rng.standard_normal(memory(shape)).astype(np.float32)) for _ in range(2))
    g[0, 0, 0, :3] = [np.nan, np.inf, -2.0]  # NaN stays NaN, a masked -2 gives -0.0
    y[0, 0, 0, :3] = -1.0
    mask = np.empty(y.shape, bool)
    want, got = np.empty_like(y), np.empty_like(y)
    with np.errstate(invalid="ignore"):  # inf·0
        relu.relu_backward(y, g, want, mask)
    relu.relu_backward_host(y, g, got, mask)
    np.testing.assert_array_equal(got, want)
    assert np.array_equal(np.signbit(got), np.signbit(want))


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_relu_forward_equals_numpy(layout, monkeypatch):
    monkeypatch.setattr(relu, "host_threads", lambda: 2)  # where it runs compiled
    memory, view = LAYOUTS[layout]
    x = view(np.random.default_rng(2).standard_normal(memory((5, 4, 3, 6))).astype(np.float32))
    x[0, 0, 0, :4] = [np.nan, -0.0, -np.inf, np.inf]
    want, got = np.empty_like(x), np.empty_like(x)
    relu.relu_forward(x, want)
    relu.relu_forward_host(x, got)
    np.testing.assert_array_equal(got, want)
    assert np.array_equal(np.signbit(got), np.signbit(want))


def test_memory_order_needs_one_dense_layout():
    a = np.zeros((2, 3, 4, 5), np.float32)
    assert memory_order([a, a[:, :, :, ::-1].copy()], axis=1)[0].shape == (2, 3, 20)
    chwn = np.zeros((3, 4, 5, 2), np.float32).transpose(3, 0, 1, 2)
    assert memory_order([chwn], axis=1)[0].shape == (1, 3, 40)
    assert memory_order([np.zeros((2, 3, 4, 5), np.float32).transpose(0, 1, 3, 2)]) is not None
    assert memory_order([a.transpose(0, 1, 3, 2), a.copy().transpose(0, 1, 3, 2).copy()]) is None
    assert memory_order([a[:, :, :, :4]]) is None  # gaps


@pytest.mark.parametrize(
    "conv_conf",
    [
        "num_filters: 4 kernel: 5 pad: 2",  # CIFAR-10's
        "num_filters: 2 kernel: 3 pad: 1",  # the transposed gradient, in the input's buffer
        "num_filters: 3 kernel_x: 3 kernel_y: 5 pad_x: 1 pad_y: 2",  # ... in its own
        "num_filters: 3 kernel: 3",
        "num_filters: 2 kernel_x: 3 kernel_y: 2 pad_x: 1 pad_y: 2 stride_x: 2 stride_y: 1",
        "num_filters: 2 kernel_x: 2 kernel_y: 3 pad_x: 3 stride_x: 3 stride_y: 1",
    ],
)
@pytest.mark.parametrize("layout", ["nchw", "batch-innermost"])
@pytest.mark.parametrize("path", ["rows", "im2col"])
def test_conv_compiled_passes_equal_numpy(conv_conf, layout, path, monkeypatch):
    """The convolution's compiled passes (im2col; the row columns
    filled from a CHWN input, and the input gradient summed back from them) give numpy's
    arrays, and the row-column buffer's padding is zero again after a step."""
    from singa_builtins.layers import _conv
    from singa_builtins.layers.cconvolution import CConvolutionLayer

    from singa_core.layer import kBackward, kForward, kTrain
    from singa_core.testing import SourceLayer, build
    from tests.layers.spatial_reference import strided_source

    monkeypatch.setattr(_conv, "ROW_COLUMNS_MIN_K", 0 if path == "rows" else 10**9)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 2, 6, 7)).astype(np.float32)
    w = g = None
    got = {}
    for flag in ("0", "1"):
        monkeypatch.setenv("SINGA_NUMBA", flag)
        src = SourceLayer(x) if layout == "nchw" else strided_source(x)
        layer = build(
            CConvolutionLayer,
            f'name: "conv" convolution_conf {{ {conv_conf} }} param {{ name: "w" }} '
            'param { name: "b" }',
            [src],
        )
        assert layer._rows == (path == "rows")
        filled = []
        if flag == "1" and path == "rows":  # the row columns' compiled fill: CHWN sources
            fill = layer._compiled.fill_rows
            monkeypatch.setattr(
                layer._compiled,
                "fill_rows",
                lambda *a, fill=fill, filled=filled: filled.append(1) or fill(*a),
            )
        if w is None:
            w = rng.standard_normal(layer.params[0].shape).astype(np.float32)
            g = rng.standard_normal(layer.grad.shape).astype(np.float32)
        layer.params[0].value[...] = w
        for _ in range(2):  # a second step reads the column buffer the first left behind
            layer.forward(kTrain | kForward, [src])
            layer.grad[...] = g
            layer.backward(kTrain | kBackward, [src])
        col = layer._xcol if path == "rows" else layer._col
        got[flag] = (layer.data.copy(), src.grad.copy(), col.copy())
        transposed = path == "rows" and conv_conf.startswith(
            ("num_filters: 2 kernel: 3 pad: 1", "num_filters: 3 kernel_x: 3 kernel_y: 5")
        )  # "same" padding, stride 1 and 2·C > F: the transposed input gradient
        if path == "rows":
            assert (layer._grad_rows is not None) == transposed
            if transposed:
                shared = conv_conf == "num_filters: 2 kernel: 3 pad: 1"
                assert (layer._gcol is layer._xcol) == shared
        if flag == "1" and path == "rows":  # forward from CHWN sources; the output gradient
            # into the gradient's row columns when the source gradient is CHWN too
            per_step = (1 + transposed) if layout == "batch-innermost" else 0
            assert len(filled) == 2 * per_step
    for mine, theirs in zip(got["1"], got["0"], strict=True):
        np.testing.assert_array_equal(mine, theirs)
