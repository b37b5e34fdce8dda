"""kActivation: RELU / SIGMOID / TANH (0.3) and STANH (implemented here; a no-op in 0.3)."""

import numpy as np
import pytest
from singa_builtins.layers.activation import ActivationLayer

from singa_core.errors import SingaError
from singa_core.layer import kBackward, kForward, kTrain
from singa_core.testing import GradCase, GradientChecker, SourceLayer, build, layer_conf, make_ctx


def reference(kind, x, g):
    x = x.astype(np.float64)
    if kind == "RELU":
        y = np.maximum(x, 0)
        return y, g * (y > 0)
    if kind == "SIGMOID":
        y = 1 / (1 + np.exp(-x))
        return y, g * y * (1 - y)
    if kind == "TANH":
        y = np.tanh(x)
        return y, g * (1 - y * y)
    y = 1.7159047 * np.tanh(0.66666667 * x)
    return y, g * (0.66666667 * 1.7159047 - (0.66666667 / 1.7159047) * y * y)


KINDS = ["RELU", "SIGMOID", "TANH", "STANH"]


def conf(kind, extra=""):
    return f'name: "a" activation_conf {{ type: {kind} }} {extra}'


@pytest.mark.parametrize("kind", KINDS)
def test_forward_backward_formulas(kind):
    rng = np.random.default_rng(0)
    src = SourceLayer(rng.standard_normal((4, 3, 2)) * 2)
    layer = build(ActivationLayer, conf(kind), [src])
    assert layer.data.shape == (4, 3, 2)
    g = rng.standard_normal((4, 3, 2))
    y, gx = reference(kind, src.data, g)
    layer.forward(kTrain | kForward, [src])
    np.testing.assert_allclose(layer.data, y, rtol=1e-5, atol=1e-6)
    layer.grad[...] = g
    layer.backward(kTrain | kBackward, [src])
    np.testing.assert_allclose(src.grad, gx, rtol=1e-5, atol=1e-6)


def test_default_type_is_relu():
    assert ActivationLayer.type_names == ("kActivation", "kCudnnActivation")
    src = SourceLayer(np.array([[-1.0, 2.0]]))
    layer = build(ActivationLayer, 'name: "a"', [src])
    layer.forward(kTrain | kForward, [src])
    np.testing.assert_array_equal(layer.data, [[0.0, 2.0]])


@pytest.mark.parametrize("kind", KINDS)
def test_gradient_check(kind):
    src = SourceLayer(np.random.default_rng(1).standard_normal((3, 5)) * 2)
    GradientChecker(stepsize=1e-2, threshold=1e-3, kink=0.0, kink_range=0.01).check(
        build(ActivationLayer, conf(kind), [src]), [src]
    )


@pytest.mark.parametrize("kind", KINDS)
def test_share_src_blobs_works_in_place(kind):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 4)) * 2
    g = rng.standard_normal((3, 4))
    y, gx = reference(kind, x.astype(np.float32), g)

    src = SourceLayer(x)
    layer = build(ActivationLayer, conf(kind, "share_src_blobs: true"), [src])
    assert layer.data is src.data and layer.grad is src.grad
    layer.forward(kTrain | kForward, [src])
    np.testing.assert_allclose(src.data, y, rtol=1e-5, atol=1e-6)  # overwritten in place
    layer.grad[...] = g  # the consumer writes into the shared buffer
    layer.backward(kTrain | kBackward, [src])
    np.testing.assert_allclose(src.grad, gx, rtol=1e-5, atol=1e-6)


def test_share_src_blobs_with_a_source_without_gradient():
    src = SourceLayer(np.array([[-1.0, 1.0]]), grad=False)
    layer = build(ActivationLayer, conf("RELU", "share_src_blobs: true"), [src])
    assert layer.data is src.data and layer.grad is not None
    layer.forward(kTrain | kForward, [src])
    layer.backward(kTrain | kBackward, [src])
    np.testing.assert_array_equal(src.data, [[0.0, 1.0]])


def test_wrong_number_of_sources():
    with pytest.raises(SingaError, match="source"):
        ActivationLayer(layer_conf(conf("TANH")), make_ctx()).setup([])


def _cases(tmp_path):
    checker = GradientChecker(stepsize=1e-2, threshold=1e-3, kink=0.0, kink_range=0.01)
    cases = []
    for kind in KINDS:
        src = SourceLayer(np.random.default_rng(1).standard_normal((3, 5)) * 2)
        cases.append(GradCase(build(ActivationLayer, conf(kind), [src]), [src], checker))
    return cases


GRADIENT_CASES = {"kActivation": _cases}


@pytest.mark.parametrize("kind", KINDS)
def test_a_relu_charges_numbas_compiler_as_krelu_does(kind, monkeypatch):
    """kActivation's RELU runs kReLU's compiled host kernels: numba's compiler is charged
    to the memory estimate once (the other kinds compile nothing)."""
    from singa_builtins.layers._host_kernels import kernels

    from singa_core.memory import NUMBA_JIT_ROW, MemoryEstimate, estimating

    monkeypatch.setenv("SINGA_NUMBA", "1")
    estimate = MemoryEstimate(None)
    with estimating(estimate, "kTrain"):
        build(ActivationLayer, conf(kind), [SourceLayer(np.ones((4, 3)))])
    charged = any(NUMBA_JIT_ROW in layer for _, layer in estimate.rows)
    assert charged == (kind == "RELU" and kernels() is not None)
