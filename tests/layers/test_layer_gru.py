"""kGRU: 0.3's test_gru_layer values, a float64 reference, the second gradient buffer,
kAggGrad, gradient checks and configuration errors."""

import numpy as np
import pytest
from singa_builtins.layers.gru import GRULayer

from singa_core.errors import SingaError
from singa_core.layer import kAggGrad, kBackward, kForward, kTrain
from singa_core.testing import (
    GradCase,
    GradientChecker,
    SourceLayer,
    build,
    layer_conf,
    make_ctx,
    peak_bytes,
)

FWD, BWD = kTrain | kForward, kTrain | kBackward


def conf(hdim=2, nparams=9, name="gru"):
    return f'name: "{name}" gru_conf {{ dim_hidden: {hdim} }}' + " param {}" * nparams


def gru(srcs, hdim=2, nparams=9, **kw):
    return build(GRULayer, conf(hdim, nparams), srcs, **kw)


# -- float64 reference --------------------------------------------------------------------
def sigmoid(a):
    return 1.0 / (1.0 + np.exp(-a))


def ref(x, h, P, g):
    """Forward output and gradients (gx, gh, param grads) of the GRU in float64."""
    x = x.reshape(len(x), -1).astype(np.float64)
    h = h.astype(np.float64)
    P = [p.astype(np.float64) for p in P]
    b = P[6:9] if len(P) == 9 else [0.0, 0.0, 0.0]
    z = sigmoid(x @ P[0].T + b[0] + h @ P[3].T)
    r = sigmoid(x @ P[1].T + b[1] + h @ P[4].T)
    hu = h @ P[5].T
    c = np.tanh(r * hu + x @ P[2].T + b[2])
    out = z * h + (1 - z) * c
    dz = g * (h - c) * z * (1 - z)
    dc = g * (1 - z) * (1 - c**2)
    dr = dc * hu * r * (1 - r)
    grads = [dz.T @ x, dr.T @ x, dc.T @ x, dz.T @ h, dr.T @ h, (dc * r).T @ h]
    if len(P) == 9:
        grads += [dz.sum(0), dr.sum(0), dc.sum(0)]
    gx = dz @ P[0] + dr @ P[1] + dc @ P[2]
    gh = dz @ P[3] + dr @ P[4] + (dc * r) @ P[5] + g * z
    return out, gx, gh, grads


def test_registered_name_and_connection():
    assert GRULayer.type_names == ("kGRU",)
    assert GRULayer.one_to_many


# -- SINGA 0.3 test_gru_layer.cc ----------------------------------------------------------
def _constant(layer, v=0.5):
    for p in layer.params:
        p.value[...] = v


def test_singa_test_gru_layer_values():
    in1 = SourceLayer(np.array([[0, 0, 0, 1], [0, 0, 1, 0]]), name="in1")
    in2 = SourceLayer(np.array([[0, 1, 0, 0], [1, 0, 0, 0]]), name="in2")
    gru1 = GRULayer(layer_conf(conf(name="gru1")), make_ctx())
    gru1.setup([in1])
    gru2 = GRULayer(layer_conf(conf(name="gru2")), make_ctx())
    gru2.setup([in2, gru1])
    for layer in (gru1, gru2):
        assert layer.data.shape == (2, 2) and layer.data.size == 4
        assert len(layer.params) == 9
        _constant(layer)
    assert gru1.params[0].value[0, 0] == 0.5
    gru1.forward(FWD, [in1])
    gru2.forward(FWD, [in2, gru1])
    np.testing.assert_allclose(gru1.data, 0.204824, atol=1e-6)
    np.testing.assert_allclose(gru2.data, 0.346753, atol=1e-6)
    assert gru1.data.dtype == np.float32


def test_param_shapes_and_names():
    x = SourceLayer(np.zeros((3, 2, 2)))
    layer = gru([x], hdim=5)
    shapes = [p.shape for p in layer.params]
    assert shapes == [(5, 4)] * 3 + [(5, 5)] * 3 + [(5,)] * 3
    assert [p.name for p in layer.params][:2] == ["gru/w_z_hx", "gru/w_r_hx"]
    assert layer.data.shape == (3, 5)
    assert len(gru([x], hdim=5, nparams=6).params) == 6


@pytest.mark.parametrize("nparams", [6, 9])
@pytest.mark.parametrize("with_h", [False, True])
def test_against_float64_reference(nparams, with_h):
    rng = np.random.default_rng(3)
    x = SourceLayer(rng.standard_normal((4, 3, 2)), name="x")
    srcs = [x]
    h0 = np.zeros((4, 3), dtype=np.float32)
    if with_h:
        hs = SourceLayer(rng.standard_normal((4, 3)), name="h")
        srcs.append(hs)
        h0 = hs.data
    layer = gru(srcs, hdim=3, nparams=nparams, param_std=0.7)
    layer.forward(FWD, srcs)
    g = rng.standard_normal((4, 3)).astype(np.float32)
    layer.grad[...] = g
    layer.backward(BWD, srcs)
    out, gx, gh, grads = ref(x.data, h0, [p.value for p in layer.params], g)
    np.testing.assert_allclose(layer.data, out, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(x.grad, gx.reshape(x.data.shape), rtol=1e-4, atol=1e-6)
    if with_h:
        np.testing.assert_allclose(srcs[1].grad, gh, rtol=1e-4, atol=1e-6)
    for p, want in zip(layer.params, grads, strict=True):
        np.testing.assert_allclose(p.grad, want, rtol=1e-4, atol=1e-6, err_msg=p.name)


def test_param_grads_overwritten_or_aggregated():
    rng = np.random.default_rng(4)
    x = SourceLayer(rng.standard_normal((2, 3)))
    layer = gru([x], hdim=2)
    layer.forward(FWD, [x])
    layer.grad[...] = rng.standard_normal((2, 2))
    layer.backward(BWD, [x])
    once = [p.grad.copy() for p in layer.params]
    layer.backward(BWD, [x])  # overwritten: the same gradients
    for p, want in zip(layer.params, once, strict=True):
        np.testing.assert_allclose(p.grad, want, rtol=1e-6)
    layer.backward(BWD | kAggGrad, [x])  # accumulated: doubled
    for p, want in zip(layer.params, once, strict=True):
        np.testing.assert_allclose(p.grad, 2 * want, rtol=1e-5, atol=1e-7)


def test_a_stacked_gru_writes_into_grad_and_the_next_step_into_grad2():
    """gru1 feeding a stacked GRU (as its input x) and its own next step (as h_prev): the
    two gradients go to two buffers (0.3 gave both the second one: one was lost)."""
    rng = np.random.default_rng(6)
    x1 = SourceLayer(rng.standard_normal((3, 4)), name="x1")
    gru1 = gru([x1], hdim=3, seed=1)
    stacked_gru = gru([gru1], hdim=2, seed=2)  # gru1's output is its input
    next_step = gru([x1, gru1], hdim=3, seed=3)  # gru1's output is its previous state
    assert gru1.grad_for(stacked_gru) is gru1.grad
    assert gru1.grad_for(next_step) is gru1.grad2


def test_gru_consumer_gets_second_buffer():
    """gru1 → gru2 (as h_prev) and gru1 → another consumer: gru2 writes into the second
    buffer, and gru1's backward uses the sum of both."""
    rng = np.random.default_rng(5)
    x1 = SourceLayer(rng.standard_normal((3, 4)), name="x1")
    x2 = SourceLayer(rng.standard_normal((3, 4)), name="x2")
    gru1 = gru([x1], hdim=3, seed=1)
    gru2 = gru([x2, gru1], hdim=3, seed=2)
    other = SourceLayer(np.zeros((1, 1)), name="other")  # any non-GRU consumer
    assert gru1.grad_for(gru2) is gru1.grad2
    assert gru1.grad_for(other) is gru1.grad
    assert gru1.grad2 is not gru1.grad

    gru1.forward(FWD, [x1])
    gru2.forward(FWD, [x2, gru1])
    g_out1 = rng.standard_normal((3, 3)).astype(np.float32)  # from gru1's other consumer
    g_out2 = rng.standard_normal((3, 3)).astype(np.float32)
    gru1.grad_for(other)[...] = g_out1
    gru2.grad[...] = g_out2
    gru2.backward(BWD, [x2, gru1])
    _, _, gh, _ = ref(x2.data, gru1.data, [p.value for p in gru2.params], g_out2)
    np.testing.assert_allclose(gru1.grad2, gh, rtol=1e-4, atol=1e-6)
    np.testing.assert_array_equal(gru1.grad, g_out1)  # untouched by gru2
    gru1.backward(BWD, [x1])
    total = g_out1.astype(np.float64) + gru1.grad2
    _, gx, _, grads = ref(x1.data, np.zeros((3, 3)), [p.value for p in gru1.params], total)
    np.testing.assert_allclose(x1.grad, gx, rtol=1e-4, atol=1e-6)
    for p, want in zip(gru1.params, grads, strict=True):
        np.testing.assert_allclose(p.grad, want, rtol=1e-4, atol=1e-6, err_msg=p.name)
    # backward leaves the buffers themselves alone (no accumulation across steps)
    np.testing.assert_array_equal(gru1.grad, g_out1)


def test_two_step_chain_gradient():
    """Finite differences through an unrolled pair: L = Σ G ⊙ gru2(x2, gru1(x1))."""
    rng = np.random.default_rng(6)
    x1 = SourceLayer(rng.standard_normal((2, 3)), name="x1")
    x2 = SourceLayer(rng.standard_normal((2, 3)), name="x2")
    gru1 = gru([x1], hdim=2, seed=1)
    gru2 = gru([x2, gru1], hdim=2, seed=2)
    G = rng.standard_normal((2, 2))

    def loss():
        gru1.forward(FWD, [x1])
        gru2.forward(FWD, [x2, gru1])
        return float((gru2.data.astype(np.float64) * G).sum())

    loss()
    gru2.grad[...] = G
    gru2.backward(BWD, [x2, gru1])
    gru1.backward(BWD, [x1])
    analytic = x1.grad.astype(np.float64).copy()
    eps = 1e-2
    for idx in np.ndindex(x1.data.shape):
        v = x1.data[idx]
        x1.data[idx] = v + np.float32(eps)
        lp = loss()
        x1.data[idx] = v - np.float32(eps)
        lm = loss()
        x1.data[idx] = v
        assert abs((lp - lm) / (2 * eps) - analytic[idx]) < 2e-3 * max(1, abs(analytic[idx]))


def test_against_torch_gru_cell():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    B, V, H = 3, 4, 5
    x = SourceLayer(rng.standard_normal((B, V)), name="x")
    hs = SourceLayer(rng.standard_normal((B, H)), name="h")
    layer = gru([x, hs], hdim=H, param_std=0.5)
    layer.forward(FWD, [x, hs])
    P = [torch.tensor(p.value, dtype=torch.float64) for p in layer.params]
    cell = torch.nn.GRUCell(V, H, dtype=torch.float64)
    with torch.no_grad():  # torch orders gates (r, z, n)
        cell.weight_ih.copy_(torch.cat([P[1], P[0], P[2]]))
        cell.weight_hh.copy_(torch.cat([P[4], P[3], P[5]]))
        cell.bias_ih.copy_(torch.cat([P[7], P[6], P[8]]))
        cell.bias_hh.zero_()
    want = cell(
        torch.tensor(x.data, dtype=torch.float64), torch.tensor(hs.data, dtype=torch.float64)
    )
    np.testing.assert_allclose(layer.data, want.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_no_allocation_per_step():
    rng = np.random.default_rng(0)
    x = SourceLayer(rng.standard_normal((64, 300)), name="x")
    h = SourceLayer(rng.standard_normal((64, 200)), name="h")
    layer = gru([x, h], hdim=200)
    for flag in (0, kAggGrad):

        def step(flag=flag):
            layer.forward(FWD, [x, h])
            layer.backward(BWD | flag, [x, h])

        # the layer's buffers are made once; what a step may allocate is numpy's own
        # transient for the tanh over the candidate gate's strided block of the stacked
        # gates (one block of 64x200 floats, 51 KB; the compiled passes allocate nothing),
        # far below a second set of buffers (12 of 64x200 before, about 600 KB)
        assert peak_bytes(step) < 64 * 200 * 4 + 16_000


# -- configuration errors -----------------------------------------------------------------
def test_missing_dim_hidden():
    x = SourceLayer(np.zeros((2, 3)))
    with pytest.raises(SingaError, match="dim_hidden") as e:
        build(GRULayer, 'name: "g"' + " param {}" * 6, [x])
    assert "gru_conf" in str(e.value.help)


def test_nonpositive_dim_hidden():
    x = SourceLayer(np.zeros((2, 3)))
    with pytest.raises(SingaError, match="positive"):
        build(GRULayer, conf(hdim=0), [x])


@pytest.mark.parametrize("nparams", [0, 5, 7, 8, 10])
def test_wrong_param_count(nparams):
    x = SourceLayer(np.zeros((2, 3)))
    with pytest.raises(SingaError, match="6 param entries"):
        gru([x], nparams=nparams)


def test_wrong_hprev_shape():
    x = SourceLayer(np.zeros((2, 3)))
    h = SourceLayer(np.zeros((2, 4)), name="h")
    with pytest.raises(SingaError, match="previous hidden state"):
        gru([x, h], hdim=3)


def test_wrong_number_of_sources():
    x = SourceLayer(np.zeros((2, 3)))
    with pytest.raises(SingaError, match="source layer"):
        gru([x, x, x])


# -- registry gradient cases --------------------------------------------------------------
def make_case(tmp_path):
    cases = []
    for nparams in (6, 9):
        rng = np.random.default_rng(nparams)
        x = SourceLayer(rng.standard_normal((3, 2, 2)), name="x")
        h = SourceLayer(rng.standard_normal((3, 3)), name="h")
        layer = gru([x, h], hdim=3, nparams=nparams, param_std=0.7)
        cases.append(GradCase(layer, [x, h], GradientChecker(stepsize=1e-2, threshold=2e-3)))
    x = SourceLayer(np.random.default_rng(1).standard_normal((2, 5)), name="x")
    cases.append(GradCase(gru([x], hdim=2, param_std=0.7), [x]))  # h_prev = 0
    return cases


def test_gradients(tmp_path):
    for case in make_case(tmp_path):
        case.run()


GRADIENT_CASES = {"kGRU": make_case}
