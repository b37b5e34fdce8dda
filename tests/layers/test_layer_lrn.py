"""kLRN: forward/backward against a float64 reference, memory layouts, errors, no
allocation per step, PyTorch cross-check and gradient cases."""

import numpy as np
import pytest
from singa_builtins.layers.lrn import LRNLayer, window_sum

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
from tests.layers.spatial_reference import batch_innermost_copy, strided_source

FWD, BWD = kTrain | kForward, kTrain | kBackward


def lrn_conf(n=3, alpha=1.0, beta=0.75, knorm=1.0, name="norm"):
    return (
        f'name: "{name}" lrn_conf {{ local_size: {n} alpha: {alpha} beta: {beta} knorm: {knorm} }}'
    )


def reference(x, g, n, alpha, beta, knorm):
    """Straightforward float64 LRN over channels: (y, gx)."""
    x = np.asarray(x, np.float64)
    g = np.asarray(g, np.float64)
    c = x.shape[1]
    h = n // 2
    norm = np.empty_like(x)
    for i in range(c):
        lo, hi = max(0, i - h), min(c, i + h + 1)
        norm[:, i] = knorm + alpha / n * (x[:, lo:hi] ** 2).sum(axis=1)
    y = x * norm**-beta
    gx = g * norm**-beta
    for i in range(c):
        for j in range(max(0, i - h), min(c, i + h + 1)):  # i in window(j)
            gx[:, i] -= (
                2 * alpha * beta / n * x[:, i] * g[:, j] * x[:, j] * norm[:, j] ** (-beta - 1)
            )
    return y, gx


def run(layer, src, g):
    layer.forward(FWD, [src])
    layer.grad[...] = g
    layer.backward(BWD, [src])
    return np.array(layer.data), np.array(src.grad)


def test_registered_names():
    assert LRNLayer.type_names == ("kLRN", "kCudnnLRN")


@pytest.mark.parametrize(
    "shape,n,alpha,beta,knorm",
    [
        ((3, 7, 4, 5), 3, 1.0, 0.75, 1.0),
        ((2, 9, 3, 3), 5, 0.5, 0.75, 2.0),
        ((2, 6, 2, 3), 1, 2.0, 0.5, 1.0),
        ((2, 5, 3, 2), 3, 1.0, 1.0, 1.5),
        ((2, 5, 3, 2), 5, 0.3, 0.6, 1.0),  # general beta: np.power
        ((2, 2, 3, 3), 7, 1.0, 0.75, 1.0),  # window wider than the channels
        ((3, 1, 2, 2), 3, 1.0, 0.75, 1.0),  # one channel
    ],
)
@pytest.mark.parametrize("layout", ["nchw", "batch-innermost"])
def test_matches_reference(shape, n, alpha, beta, knorm, layout):
    rng = np.random.default_rng(4)
    x = rng.standard_normal(shape) * 2
    g = rng.standard_normal(shape)
    src = SourceLayer(x) if layout == "nchw" else strided_source(x)
    layer = build(LRNLayer, lrn_conf(n, alpha, beta, knorm), [src])
    assert layer.data.shape == shape and layer.data.strides == src.data.strides
    y, gx = run(layer, src, g)
    ry, rgx = reference(src.data, g, n, alpha, beta, knorm)
    np.testing.assert_allclose(y, ry, rtol=2e-6, atol=1e-6)
    np.testing.assert_allclose(gx, rgx, rtol=1e-5, atol=1e-5)


def test_cifar_settings_and_grad_buffer_in_another_layout():
    # examples/cifar10: local_size 3, alpha 5e-05, beta 0.75, knorm 1, activations O(10)
    rng = np.random.default_rng(5)
    x = np.abs(rng.standard_normal((4, 8, 5, 5))) * 30
    g = rng.standard_normal(x.shape)
    src = SourceLayer(batch_innermost_copy(x))
    src.data = batch_innermost_copy(x)
    src.grad = np.zeros(x.shape, np.float32)  # C-contiguous although data is strided
    layer = build(LRNLayer, lrn_conf(3, 5e-05, 0.75, 1.0), [src])
    y, gx = run(layer, src, g)
    ry, rgx = reference(x.astype(np.float32), g, 3, 5e-05, 0.75, 1.0)
    np.testing.assert_allclose(y, ry, rtol=2e-6, atol=1e-5)
    np.testing.assert_allclose(gx, rgx, rtol=1e-5, atol=1e-6)


def test_defaults_and_aliases_share_the_class():
    src = SourceLayer(np.ones((1, 7, 1, 1)))
    layer = build(LRNLayer, 'name: "n"', [src])  # no lrn_conf: 0.3's defaults
    assert (layer.local_size, layer.alpha, layer.beta, layer.knorm) == (5, 1.0, 0.75, 1.0)
    layer.forward(FWD, [src])
    # middle channel: window of 5 ones → norm = 1 + (1/5)·5 = 2; edges: 1 + 3/5
    np.testing.assert_allclose(layer.data[0, 3, 0, 0], 2.0**-0.75, rtol=1e-6)
    np.testing.assert_allclose(layer.data[0, 0, 0, 0], 1.6**-0.75, rtol=1e-6)


def test_window_sum_helper():
    a = np.arange(2 * 6, dtype=np.float32).reshape(2, 6)
    for half in range(0, 8):
        out = np.empty_like(a)
        window_sum(a, out, half)
        want = [[row[max(0, i - half) : i + half + 1].sum() for i in range(6)] for row in a]
        np.testing.assert_array_equal(out, want)


def test_source_without_gradient():
    src = SourceLayer(np.ones((2, 3, 2, 2)), grad=False)
    layer = build(LRNLayer, lrn_conf(), [src])
    layer.forward(FWD, [src])
    layer.backward(BWD, [src])  # nothing to write


@pytest.mark.parametrize("n", [0, 2, 4, -3])
def test_local_size_must_be_positive_and_odd(n):
    layer = LRNLayer(layer_conf(lrn_conf(n)), make_ctx())
    with pytest.raises(SingaError, match="local_size must be a positive odd") as err:
        layer.setup([SourceLayer(np.ones((1, 4, 2, 2)))])
    assert "help" in str(err.value).lower() or err.value.help


@pytest.mark.parametrize("knorm,alpha", [(0.0, 1.0), (-1.0, 1.0), (1.0, -0.5)])
def test_norm_must_stay_positive(knorm, alpha):
    layer = LRNLayer(layer_conf(lrn_conf(3, alpha=alpha, knorm=knorm)), make_ctx())
    with pytest.raises(SingaError, match="knorm > 0 and alpha >= 0"):
        layer.setup([SourceLayer(np.ones((1, 4, 2, 2)))])


@pytest.mark.parametrize("shape", [(4, 6), (2, 3, 4), (1, 2, 3, 4, 5)])
def test_needs_a_4d_source(shape):
    layer = LRNLayer(layer_conf(lrn_conf()), make_ctx())
    with pytest.raises(SingaError, match=r"4-D .*has shape"):
        layer.setup([SourceLayer(np.ones(shape))])


def test_wrong_number_of_sources():
    with pytest.raises(SingaError, match="source"):
        LRNLayer(layer_conf(lrn_conf()), make_ctx()).setup([])


@pytest.mark.parametrize("layout", ["nchw", "batch-innermost"])
@pytest.mark.parametrize("beta", [0.75, 0.6])
def test_no_allocation_per_step(layout, beta):
    x = np.random.default_rng(0).standard_normal((40, 16, 16, 16))  # arrays of 640 KB
    src = SourceLayer(x) if layout == "nchw" else strided_source(x)
    layer = build(LRNLayer, lrn_conf(5, beta=beta), [src])

    def step():
        layer.forward(FWD, [src])
        layer.backward(BWD, [src])

    # no array-sized allocation; slice-adds along the channel axis of an NCHW-contiguous
    # array go through numpy's buffered iterator, whose transient buffers take at most
    # 3 operands × 8192 elements × 4 bytes whatever the array size
    assert peak_bytes(step) < 110_000


def test_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(6)
    for n, alpha, beta, knorm, layout in [
        (3, 5e-05, 0.75, 1.0, "batch-innermost"),
        (5, 1e-4, 0.75, 1.0, "nchw"),
        (5, 0.8, 0.6, 2.0, "nchw"),
        (3, 1.5, 0.75, 1.0, "batch-innermost"),
    ]:
        x = (rng.standard_normal((6, 10, 5, 4)) * (30 if alpha < 1e-3 else 1)).astype(np.float32)
        g = rng.standard_normal(x.shape).astype(np.float32)
        src = SourceLayer(x) if layout == "nchw" else strided_source(x)
        layer = build(LRNLayer, lrn_conf(n, alpha, beta, knorm), [src])
        y, gx = run(layer, src, g)
        xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
        yt = torch.nn.functional.local_response_norm(xt, n, alpha=alpha, beta=beta, k=knorm)
        yt.backward(torch.tensor(g, dtype=torch.float64))
        np.testing.assert_allclose(y, yt.detach().numpy(), rtol=2e-6, atol=2e-6)
        np.testing.assert_allclose(gx, xt.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_gradient_check_cifar_settings():
    x = np.abs(np.random.default_rng(8).standard_normal((3, 5, 3, 3))) * 40
    src = strided_source(x)
    layer = build(LRNLayer, lrn_conf(3, 5e-05, 0.75, 1.0), [src])
    GradientChecker(stepsize=1e-1, threshold=2e-3).check(layer, [src])


def _case(tmp_path):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((3, 6, 3, 4))
    cases = []
    for src, conf in [
        (SourceLayer(x), lrn_conf(3, alpha=2.0, beta=0.75, knorm=1.0)),
        (strided_source(x), lrn_conf(5, alpha=1.0, beta=0.75, knorm=1.0)),
        (strided_source(x), lrn_conf(3, alpha=1.5, beta=0.6, knorm=2.0)),
    ]:
        cases.append(GradCase(build(LRNLayer, conf, [src]), [src], GradientChecker()))
    return cases


GRADIENT_CASES = {"kLRN": _case}
