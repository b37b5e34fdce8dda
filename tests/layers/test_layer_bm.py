"""kBM: batch normalisation against a float64 reference (training and inference), running
statistics, memory layouts, errors, no allocation per step, gradient cases."""

import numpy as np
import pytest
from singa_builtins.layers.bm import AVERAGE_FACTOR, EPS, BMLayer

from singa_core.errors import SingaError
from singa_core.layer import kAggGrad, kBackward, kForward, kTest, kTrain
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
TFWD, TBWD = kTest | kForward, kTest | kBackward
# cudnn_bm.conf's params: scale 1, bias 0, running mean 0, running inverse std 0
INIT = (1, 0, 0, 0)


def bm_conf(init=INIT, name="bm"):
    params = " ".join(f"param {{ init {{ type: kConstant value: {v} }} }}" for v in init)
    return f'name: "{name}" {params}'


def make(src, init=INIT, random_affine=True, seed=0):
    layer = BMLayer(layer_conf(bm_conf(init)), make_ctx(seed))
    layer.setup([src])
    for p, v in zip(layer.params, init, strict=True):
        p.value[...] = v
    if random_affine:
        rng = np.random.default_rng(seed + 1)
        layer.scale.value[...] = rng.uniform(0.5, 2.0, layer.scale.shape)
        layer.bias.value[...] = rng.standard_normal(layer.bias.shape)
    return layer


def axes_of(x):
    return (0, 2, 3) if x.ndim == 4 else (0,)


def reference_train(x, g, gamma, beta):
    """float64 batch norm with batch statistics: y, gx, ggamma, gbeta, mean, biased var."""
    x, g = np.asarray(x, np.float64), np.asarray(g, np.float64)
    ax = axes_of(x)
    gamma = np.asarray(gamma, np.float64).reshape([1, -1] + [1] * (x.ndim - 2))
    beta = np.asarray(beta, np.float64).reshape(gamma.shape)
    m = x.size // x.shape[1]
    mu = x.mean(axis=ax, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=ax, keepdims=True)
    xhat = (x - mu) / np.sqrt(var + EPS)
    y = gamma * xhat + beta
    gbeta = g.sum(axis=ax, keepdims=True)
    ggamma = (g * xhat).sum(axis=ax, keepdims=True)
    gx = gamma / np.sqrt(var + EPS) * (g - gbeta / m - xhat * ggamma / m)
    return y, gx, ggamma, gbeta, mu, var


def run(layer, src, g, train=True):
    layer.forward(FWD if train else TFWD, [src])
    layer.grad[...] = g
    layer.backward(BWD if train else TBWD, [src])
    return np.array(layer.data), np.array(src.grad)


def test_registered_names():
    assert BMLayer.type_names == ("kBM", "kCudnnBM")


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (6, 4)])
def test_params_shapes_and_learnable_flags(shape):
    layer = make(SourceLayer(np.zeros(shape)))
    want = (1, shape[1], 1, 1) if len(shape) == 4 else (1, shape[1])
    assert [p.shape for p in layer.params] == [want] * 4
    assert [p.name for p in layer.params] == [
        "bm/scale",
        "bm/bias",
        "bm/running_mean",
        "bm/running_inv_std",
    ]
    assert [p.learnable for p in layer.params] == [True, True, False, False]
    assert layer.data.shape == shape


@pytest.mark.parametrize(
    "shape,layout",
    [((4, 3, 5, 6), "nchw"), ((4, 3, 5, 6), "batch-innermost"), ((7, 5), "nchw")],
)
def test_training_matches_reference(shape, layout):
    rng = np.random.default_rng(3)
    x = rng.standard_normal(shape) * 3 + 2
    g = rng.standard_normal(shape)
    src = SourceLayer(x) if layout == "nchw" else strided_source(x)
    layer = make(src)
    assert layer.data.strides == src.data.strides
    gamma, beta = layer.scale.value.copy(), layer.bias.value.copy()
    y, gx = run(layer, src, g)
    ry, rgx, rgg, rgb, mu, var = reference_train(src.data, g, gamma, beta)
    np.testing.assert_allclose(y, ry, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gx, rgx, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(layer.scale.grad, rgg.reshape(gamma.shape), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(layer.bias.grad, rgb.reshape(gamma.shape), rtol=1e-4, atol=1e-4)
    for p in (layer.running_mean, layer.running_inv_std):
        np.testing.assert_array_equal(p.grad, 0)
    # no estimate yet (inverse std 0): the first batch's statistics are taken outright
    m = x.size // shape[1]
    np.testing.assert_allclose(layer.running_mean.value, mu.reshape(gamma.shape), rtol=1e-5)
    unbiased = var * m / (m - 1)
    np.testing.assert_allclose(
        layer.running_inv_std.value, (1 / np.sqrt(unbiased + EPS)).reshape(gamma.shape), rtol=1e-5
    )


def test_running_statistics_exponential_average():
    rng = np.random.default_rng(4)
    shape = (5, 3, 2, 2)
    src = SourceLayer(np.zeros(shape))
    layer = make(src)
    mean_r = np.array([0.5, -1.0, 2.0])
    var_r = np.array([1.0, 4.0, 0.25])
    layer.running_mean.value[...] = mean_r.reshape(1, 3, 1, 1)
    layer.running_inv_std.value[...] = (1 / np.sqrt(var_r + EPS)).reshape(1, 3, 1, 1)
    m = 5 * 4
    for _ in range(3):
        x = rng.standard_normal(shape) * 2 - 1
        src.data[...] = x
        layer.forward(FWD, [src])
        f = AVERAGE_FACTOR
        mean_r = (1 - f) * mean_r + f * x.mean(axis=(0, 2, 3))
        var_r = (1 - f) * var_r + f * x.var(axis=(0, 2, 3)) * m / (m - 1)
        np.testing.assert_allclose(layer.running_mean.value.ravel(), mean_r, rtol=1e-5)
        np.testing.assert_allclose(
            layer.running_inv_std.value.ravel(), 1 / np.sqrt(var_r + EPS), rtol=1e-5
        )
    # inference does not move them
    before = [p.value.copy() for p in layer.params]
    layer.forward(TFWD, [src])
    for p, b in zip(layer.params, before, strict=True):
        np.testing.assert_array_equal(p.value, b)


@pytest.mark.parametrize("layout", ["nchw", "batch-innermost"])
def test_inference_uses_running_statistics(layout):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 4, 2, 3)) + 1
    g = rng.standard_normal(x.shape)
    src = SourceLayer(x) if layout == "nchw" else strided_source(x)
    layer = make(src)
    mu = rng.standard_normal((1, 4, 1, 1))
    rho = rng.uniform(0.5, 2.0, (1, 4, 1, 1))
    layer.running_mean.value[...] = mu
    layer.running_inv_std.value[...] = rho
    gamma, beta = (p.value.astype(np.float64) for p in (layer.scale, layer.bias))
    y, gx = run(layer, src, g, train=False)
    xd = np.asarray(src.data, np.float64)
    np.testing.assert_allclose(y, gamma * (xd - mu) * rho + beta, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gx, g * gamma * rho, rtol=1e-5, atol=1e-6)
    gg = (g * (xd - mu) * rho).sum(axis=(0, 2, 3), keepdims=True)
    np.testing.assert_allclose(layer.scale.grad, gg, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(layer.bias.grad, g.sum(axis=(0, 2, 3), keepdims=True), rtol=1e-5)
    np.testing.assert_array_equal(layer.running_mean.value, mu.astype(np.float32))


def test_unset_running_statistics_give_the_bias_at_inference():
    # as 0.3 with cudnn_bm.conf's initial values: inverse std 0 → y = bias
    src = SourceLayer(np.random.default_rng(1).standard_normal((2, 3, 2, 2)))
    layer = make(src)
    layer.forward(TFWD, [src])
    np.testing.assert_allclose(layer.data, np.broadcast_to(layer.bias.value, layer.data.shape))


def test_agg_grad_accumulates_param_gradients():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((4, 3, 2, 2))
    g = rng.standard_normal(x.shape)
    src = SourceLayer(x)
    layer = make(src)
    run(layer, src, g)
    once = [layer.scale.grad.copy(), layer.bias.grad.copy()]
    layer.backward(BWD | kAggGrad, [src])
    np.testing.assert_allclose(layer.scale.grad, 2 * once[0], rtol=1e-6)
    np.testing.assert_allclose(layer.bias.grad, 2 * once[1], rtol=1e-6)


def test_grad_buffer_in_another_layout_and_source_without_gradient():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((4, 3, 2, 5))
    g = rng.standard_normal(x.shape)
    src = SourceLayer(x)
    src.data = batch_innermost_copy(x)
    src.grad = np.zeros(x.shape, np.float32)  # C-contiguous although data is strided
    layer = make(src)
    gamma, beta = layer.scale.value.copy(), layer.bias.value.copy()
    _, gx = run(layer, src, g)
    np.testing.assert_allclose(
        gx, reference_train(x.astype(np.float32), g, gamma, beta)[1], rtol=1e-4, atol=1e-5
    )
    nograd = SourceLayer(x, grad=False)
    layer = make(nograd)
    run(layer, nograd, g)
    assert np.isfinite(layer.scale.grad).all()


@pytest.mark.parametrize("shape", [(4,), (2, 3, 4), (1, 2, 3, 4, 5)])
def test_source_must_be_2d_or_4d(shape):
    layer = BMLayer(layer_conf(bm_conf()), make_ctx())
    with pytest.raises(SingaError, match=r"kBM.*has shape"):
        layer.setup([SourceLayer(np.ones(shape))])


def test_needs_four_params():
    layer = BMLayer(layer_conf(bm_conf(init=(1, 0))), make_ctx())
    with pytest.raises(SingaError, match="needs 4 param entries") as err:
        layer.setup([SourceLayer(np.ones((2, 3, 1, 1)))])
    assert "kConstant" in str(err.value)


def test_wrong_number_of_sources():
    with pytest.raises(SingaError, match="source"):
        BMLayer(layer_conf(bm_conf()), make_ctx()).setup([])


@pytest.mark.parametrize("layout", ["nchw", "batch-innermost"])
@pytest.mark.parametrize("train", [True, False])
def test_no_allocation_per_step(layout, train):
    x = np.random.default_rng(0).standard_normal((40, 16, 16, 16))  # arrays of 640 KB
    src = SourceLayer(x) if layout == "nchw" else strided_source(x)
    layer = make(src)
    fwd, bwd = (FWD, BWD) if train else (TFWD, TBWD)

    def step():
        layer.forward(fwd, [src])
        layer.backward(bwd, [src])

    # per-channel vectors and numpy's transient ufunc buffers only
    assert peak_bytes(step) < 110_000


def _case(tmp_path):
    rng = np.random.default_rng(8)
    x4 = rng.standard_normal((3, 4, 2, 3)) * 2 + 1
    x2 = rng.standard_normal((6, 5)) + 0.5
    cases = []
    for src in (SourceLayer(x4), strided_source(x4), SourceLayer(x2)):
        layer = build(BMLayer, bm_conf(), [src])  # params N(0, 1): γ of either sign
        cases.append(GradCase(layer, [src], GradientChecker()))
    return cases


GRADIENT_CASES = {"kBM": _case}
