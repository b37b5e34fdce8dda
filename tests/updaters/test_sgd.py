"""kSGD closed-form checks: clip -> scale -> weight decay, then (momentum) SGD.

Expected values are computed here from SINGA's formulas (by hand or in float64), not with
the implementation under test.
"""

import numpy as np
import pytest
from singa_builtins.updaters.sgd import SGDUpdater

from singa_core.schema import job_pb2
from singa_core.testing.updaters import check_in_place_allocation_free
from tests.updaters.updater_checks import fixed_lr, step_lr


def sgd(lr, **conf):
    return SGDUpdater(job_pb2.UpdaterProto(type=job_pb2.kSGD, **conf), lr)


def f32(*xs):
    return np.array(xs, dtype=np.float32)


def test_plain_sgd_by_hand():
    up = sgd(fixed_lr(0.5))
    assert up.state_names == ()
    w = f32(1.0, -2.0)
    state = up.init_state(w)
    assert state == {}
    for _ in range(3):
        up.apply(0, w, f32(0.5, 1.0), state)
    # w = w0 - 3 * 0.5 * g
    np.testing.assert_allclose(w, [1.0 - 0.75, -2.0 - 1.5], rtol=1e-6)
    assert w.dtype == np.float32


def test_momentum_constant_gradient_closed_form():
    """h_t = -lr*g*(1-m^t)/(1-m); w_t = w0 - lr*g*(t - m*(1-m^t)/(1-m))/(1-m)."""
    lr, m = 0.1, 0.9
    up = sgd(fixed_lr(lr), momentum=m)
    assert up.state_names == ("history",)
    g = np.float64(0.3)
    w = f32(2.0, 2.0, 2.0)
    state = up.init_state(w)
    assert set(state) == {"history"} and not state["history"].any()
    for t in range(1, 11):
        up.apply(t - 1, w, np.full(3, g, np.float32), state)
        h_t = -lr * g * (1 - m**t) / (1 - m)
        w_t = 2.0 - lr * g * (t - m * (1 - m**t) / (1 - m)) / (1 - m)
        np.testing.assert_allclose(state["history"], h_t, rtol=2e-6)
        np.testing.assert_allclose(w, w_t, rtol=2e-6)


def test_weight_decay_and_scales_by_hand():
    """Scalar, two steps; g' = g*s + wd*wd_scale*w; lr' = base_lr*lr_scale."""
    up = sgd(fixed_lr(0.2), weight_decay=0.1)
    w, state = f32(1.0), {}
    # step 0: g' = 4*0.25 + 0.1*2*1 = 1.2; w = 1 - 0.2*0.5*1.2 = 0.88
    up.apply(0, w, f32(4.0), state, scale=0.25, lr_scale=0.5, wd_scale=2.0)
    assert float(w[0]) == pytest.approx(0.88, rel=1e-6)
    # step 1: g' = 4*0.25 + 0.2*0.88 = 1.176; w = 0.88 - 0.1*1.176 = 0.7624
    up.apply(1, w, f32(4.0), state, scale=0.25, lr_scale=0.5, wd_scale=2.0)
    assert float(w[0]) == pytest.approx(0.7624, rel=1e-6)


def test_wd_scale_zero_disables_decay():
    up = sgd(fixed_lr(0.1), weight_decay=0.5)
    w = f32(3.0)
    up.apply(0, w, f32(1.0), {}, wd_scale=0.0)
    assert float(w[0]) == pytest.approx(2.9, rel=1e-6)


def test_clip_before_scale():
    up = sgd(fixed_lr(1.0), clip_low=-1.0, clip_high=1.0)
    w = f32(0.0, 0.0, 0.0, 0.0)
    up.apply(0, w, f32(3.0, -3.0, 0.5, 1.0), {}, scale=0.25)
    # clip to [1, -1, 0.5, 1] first, then * 0.25 (scaling first would give 0.75 for the 3s)
    np.testing.assert_allclose(w, [-0.25, 0.25, -0.125, -0.25], rtol=1e-7)


def test_no_clipping_when_high_not_above_low():
    up = sgd(fixed_lr(1.0), clip_low=1.0, clip_high=1.0)
    w = f32(0.0)
    up.apply(0, w, f32(5.0), {})
    assert float(w[0]) == -5.0


def test_scale_is_one_over_num_total():
    """Two replicas' summed gradient scaled by 1/2 equals one replica's mean gradient."""
    up = sgd(fixed_lr(0.1), momentum=0.5)
    w1, w2 = f32(1.0, 1.0), f32(1.0, 1.0)
    s1, s2 = up.init_state(w1), up.init_state(w2)
    for step in range(4):
        g_a, g_b = f32(0.2, -0.4), f32(0.6, 0.0)
        up.apply(step, w1, g_a + g_b, s1, scale=0.5)
        up.apply(step, w2, (g_a + g_b) / 2, s2)
    np.testing.assert_allclose(w1, w2, rtol=1e-6)


def test_step_schedule_interplay():
    """kStep(base 0.1, gamma 0.5, freq 2): lr = 0.1, 0.1, 0.05, 0.05, 0.025, 0.025."""
    up = sgd(step_lr(0.1, 0.5, 2))
    w = f32(1.0)
    for step in range(6):
        up.apply(step, w, f32(1.0), {})
    assert float(w[0]) == pytest.approx(1.0 - 2 * (0.1 + 0.05 + 0.025), rel=1e-6)


def reference_sgd(w, grads, steps, *, base_lr, gamma, freq, m, wd, wd_scale, lr_scale, s, clip):
    """Float64 re-statement of SINGA's formulas (kStep schedule)."""
    w = w.astype(np.float64).copy()
    h = np.zeros_like(w)
    out = []
    for step, grad_fn in zip(steps, grads, strict=True):
        g = grad_fn(w)
        if clip[1] > clip[0]:
            g = np.clip(g, clip[0], clip[1])
        g = g * s
        if wd * wd_scale > 0:
            g = g + wd * wd_scale * w
        lr = base_lr * gamma ** (step // freq) * lr_scale
        if m > 0:
            h = m * h - lr * g
            w = w + h
        else:
            w = w - lr * g
        out.append(w.copy())
    return out


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_least_squares_matches_float64_reference(momentum):
    """Caffe-style run on 0.5*||A w - b||^2 with every option on, over 25 steps."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((8, 3))
    b = rng.standard_normal(8)
    opts = dict(
        base_lr=0.05,
        gamma=0.7,
        freq=5,
        m=momentum,
        wd=0.01,
        wd_scale=2.0,
        lr_scale=0.8,
        s=0.5,
        clip=(-3.0, 3.0),
    )

    def grad_fn(w):
        return a.T @ (a @ w - b)  # summed over 2 "replicas" would be 2x; s = 1/2

    w0 = np.array([1.0, -1.0, 0.5])
    ref = reference_sgd(w0, [lambda w: 2 * grad_fn(w)] * 25, range(25), **opts)

    up = sgd(
        step_lr(0.05, 0.7, 5), momentum=momentum, weight_decay=0.01, clip_low=-3.0, clip_high=3.0
    )
    w = w0.astype(np.float32)
    state = up.init_state(w)
    for step in range(25):
        g = (2 * grad_fn(w.astype(np.float64))).astype(np.float32)
        up.apply(step, w, g, state, scale=0.5, lr_scale=0.8, wd_scale=2.0)
        np.testing.assert_allclose(w, ref[step], rtol=1e-4, atol=1e-5)
    # it converges toward the ridge solution
    loss0 = 0.5 * np.sum((a @ w0 - b) ** 2)
    assert 0.5 * np.sum((a @ w.astype(np.float64) - b) ** 2) < loss0


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_update_is_in_place_and_allocation_free(momentum):
    # (weight decay is added by Updater.prologue in the core, which is not tested here)
    check_in_place_allocation_free(sgd(fixed_lr(0.01), momentum=momentum, clip_low=-1, clip_high=1))


@pytest.mark.parametrize("wd", [0.0, 0.01])
def test_the_folded_rule_is_the_rule(wd):
    """fold() gives (alpha, beta) with w <- beta*w + alpha*g equal to apply(): plain SGD
    with the server's scale, the Param's lr_scale and wd_scale, by hand."""
    lr, scale, lr_scale, wd_scale = 0.3, 0.5, 2.0, 3.0
    up = sgd(fixed_lr(lr), weight_decay=wd)
    alpha, beta = up.fold(4, scale=scale, lr_scale=lr_scale, wd_scale=wd_scale)
    eff = lr * lr_scale
    assert alpha == pytest.approx(-eff * scale)
    assert beta == pytest.approx(1.0 - eff * wd * wd_scale)
    w, g = f32(1.0, -2.0, 0.25), f32(0.5, 1.0, -4.0)
    folded = (beta * w.astype(np.float64) + alpha * g).astype(np.float32)
    up.apply(4, w, g.copy(), {}, scale=scale, lr_scale=lr_scale, wd_scale=wd_scale)
    np.testing.assert_allclose(w, folded, rtol=1e-6)


def test_a_rule_that_needs_the_gradient_is_not_folded():
    assert sgd(fixed_lr(0.1), momentum=0.9).fold(0) is None
    assert sgd(fixed_lr(0.1), clip_low=-1.0, clip_high=1.0).fold(0) is None
    assert sgd(step_lr(0.1, 0.5, 2)).fold(4) == pytest.approx((-0.025, 1.0))


@pytest.mark.parametrize("numba_on", ["1", "0"])
def test_the_momentum_step_in_one_pass_is_the_four_passes(monkeypatch, numba_on):
    """kernel sgd_momentum_step on the host (compiled where numba is installed) computes
    numpy's four passes, and leaves the gradient as the worker sent it."""
    from singa_builtins.updaters import _momentum_step as ms

    monkeypatch.setenv("SINGA_NUMBA", numba_on)
    rng = np.random.default_rng(3)
    w, g, h = (rng.standard_normal(10_001).astype(np.float32) for _ in range(3))
    args = (0.5, 2e-3, np.float32(0.05), 0.9)  # scale, weight decay, lr, momentum
    w1, g1, h1 = w.copy(), g.copy(), h.copy()
    ms.host_step(w1, g1, h1, *args)
    w2, g2, h2 = w.copy(), g.copy(), h.copy()
    ms.numpy_step(w2, g2, h2, *args)
    # closed form in float64
    h_ref = 0.9 * h.astype(np.float64) - 0.05 * (0.5 * g + 2e-3 * w.astype(np.float64))
    np.testing.assert_allclose(h1, h_ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(w1, w + h_ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(h1, h2, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(w1, w2, rtol=1e-6, atol=1e-7)
    if numba_on == "1" and ms._STEP.get() is not None:
        np.testing.assert_array_equal(g1, g)  # one pass: the gradient is only read
    # a strided slice takes numpy's passes
    w3 = np.zeros(20_002, np.float32)[::2]
    w3[...] = w
    ms.host_step(w3, g.copy(), h.copy(), *args)
    np.testing.assert_allclose(w3, w2, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("parts", [2, 3])
def test_the_threaded_momentum_step_is_the_serial_one_bit_for_bit(monkeypatch, parts):
    """Split over threads (as beside a BLAS on several), each part runs the serial loop's
    operations: the same bits as one thread, the gradient only read."""
    from singa_builtins.updaters import _momentum_step as ms

    monkeypatch.setenv("SINGA_NUMBA", "1")
    made = ms._STEP.get()
    if made is None or made[1] is None:
        pytest.skip("numba (the fast extra) with a shareable thread pool is not installed")
    serial, split = made
    rng = np.random.default_rng(4)
    n = ms.PARALLEL_MIN + 12_345
    w, g, h = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
    args = (np.float32(0.5), np.float32(2e-3), np.float32(0.05), np.float32(0.9))
    w1, h1 = w.copy(), h.copy()
    serial(w1, g, h1, *args)
    w2, g2, h2 = w.copy(), g.copy(), h.copy()
    split(w2, g2, h2, *args, parts)
    np.testing.assert_array_equal(w2, w1)
    np.testing.assert_array_equal(h2, h1)
    np.testing.assert_array_equal(g2, g)
    # host_step takes the split where the BLAS runs on several threads
    from singa_core import jit

    monkeypatch.setattr(jit, "host_threads", lambda: 2)
    w3, h3 = w.copy(), h.copy()
    ms.host_step(w3, g.copy(), h3, *(float(a) for a in args))
    np.testing.assert_array_equal(w3, w1)
    np.testing.assert_array_equal(h3, h1)
