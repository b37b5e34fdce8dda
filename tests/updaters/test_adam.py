"""kAdam closed-form checks: (no clip) -> scale -> weight decay, then 0.3's Adam rule.

Expected values are computed here in float64 from SINGA 0.3's formulas (no bias
correction, epsilon inside the square root), not with the implementation under test.
"""

import numpy as np
import pytest
from singa_builtins.updaters.adam import AdamUpdater

from singa_core.errors import SingaError
from singa_core.plugin_host.host import get_host
from singa_core.schema import job_pb2
from singa_core.testing import (
    LeastSquares,
    check_against_reference,
    check_in_place_allocation_free,
    check_snapshot_restore,
)
from tests.updaters.updater_checks import fixed_lr, step_lr


def adam(lr, beta1=None, beta2=None, **conf):
    proto = job_pb2.UpdaterProto(type=job_pb2.kAdam, **conf)
    if beta1 is not None:
        proto.adam_conf.beta1 = beta1
    if beta2 is not None:
        proto.adam_conf.beta2 = beta2
    return AdamUpdater(proto, lr)


def reference(
    w0, grad_fn, nsteps, *, base_lr, gamma, freq, b1, b2, delta, wd, wd_scale, lr_scale, s
):
    """Float64 re-statement of 0.3's kAdam (kStep schedule); no clipping, by design."""
    w = w0.astype(np.float64).copy()
    m = np.zeros_like(w)
    v = np.zeros_like(w)
    out = []
    for step in range(nsteps):
        g = grad_fn(w) * s
        if wd * wd_scale > 0:
            g = g + wd * wd_scale * w
        lr = base_lr * gamma ** (step // freq) * lr_scale
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        w = w - lr * m / np.sqrt(v + delta)
        out.append(w.copy())
    return out


def test_registered_as_kadam():
    assert get_host().get("updater", "kAdam") is AdamUpdater


def test_defaults_and_state():
    up = adam(fixed_lr(0.1))
    assert (up.beta1, up.beta2) == pytest.approx((0.9, 0.999))
    assert up.delta == pytest.approx(1e-8)
    assert up.state_names == ("m", "v")
    state = up.init_state(np.ones((2, 3), np.float32))
    assert set(state) == {"m", "v"}
    assert all(a.shape == (2, 3) and a.dtype == np.float32 and not a.any() for a in state.values())


def test_constant_gradient_closed_form_without_bias_correction():
    """m_t = g (1 - b1^t), v_t = g^2 (1 - b2^t): step t moves lr*m_t/sqrt(v_t + delta)."""
    lr, b1, b2, delta = 0.01, 0.8, 0.9, 1e-4
    up = adam(fixed_lr(lr), beta1=b1, beta2=b2, delta=delta)
    g = np.array([0.5, -2.0, 0.0])
    w = np.zeros(3, np.float32)
    state = up.init_state(w)
    expect = np.zeros(3)
    for t in range(1, 9):
        up.apply(t - 1, w, g.astype(np.float32), state)
        m_t, v_t = g * (1 - b1**t), g * g * (1 - b2**t)
        expect -= lr * m_t / np.sqrt(v_t + delta)
        np.testing.assert_allclose(state["m"], m_t, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(state["v"], v_t, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(w, expect, rtol=1e-5, atol=1e-7)
    # the first step is lr * (1-b1) g / sqrt((1-b2) g^2 + delta) ~ 0.63 lr, not ~lr as
    # with bias correction
    w1 = np.zeros(1, np.float32)
    adam(fixed_lr(lr), beta1=b1, beta2=b2, delta=delta).apply(
        0, w1, np.array([0.5], np.float32), up.init_state(w1)
    )
    assert float(w1[0]) == pytest.approx(-lr * 0.1 / np.sqrt(0.0251), rel=1e-6)
    assert float(w1[0]) > -0.65 * lr


def test_delta_is_inside_the_square_root():
    up = adam(fixed_lr(1.0), beta1=0.0, beta2=0.0, delta=0.75)
    w = np.zeros(1, np.float32)
    up.apply(0, w, np.array([0.5], np.float32), up.init_state(w))
    assert float(w[0]) == pytest.approx(-0.5 / np.sqrt(0.25 + 0.75), rel=1e-6)  # not /1.25


def test_clipping_is_not_applied():
    """0.3's Adam skips the clip; scale and weight decay still apply."""
    up = adam(fixed_lr(1.0), beta1=0.5, beta2=0.5, clip_low=-0.1, clip_high=0.1, weight_decay=0.5)
    w = np.ones(1, np.float32)
    state = up.init_state(w)
    up.apply(0, w, np.array([4.0], np.float32), state, scale=0.5, wd_scale=2.0)
    # g = 4 * 0.5 + 0.5 * 2 * 1 = 3 (clipping first would give 0.1 * 0.5 + 1 = 1.05)
    assert float(state["m"][0]) == pytest.approx(1.5)
    assert float(state["v"][0]) == pytest.approx(4.5)
    assert float(w[0]) == pytest.approx(1.0 - 1.5 / np.sqrt(4.5 + 1e-8), rel=1e-6)


@pytest.mark.parametrize("clip", [(0.0, 0.0), (-0.5, 0.5)])
def test_least_squares_matches_float64_reference(clip):
    """Caffe-style run on 0.5*||A w - b||^2 with every option on, over 25 steps."""
    problem = LeastSquares()
    opts = dict(
        base_lr=0.05,
        gamma=0.7,
        freq=5,
        b1=0.8,
        b2=0.95,
        delta=1e-6,
        wd=0.01,
        wd_scale=2.0,
        lr_scale=0.8,
        s=0.5,
    )
    ref = reference(problem.w0, problem.grad, 25, **opts)
    assert np.abs(problem.grad(problem.w0) * 0.5).max() > 1.0  # a configured clip would have bitten

    up = adam(
        step_lr(0.05, 0.7, 5),
        beta1=0.8,
        beta2=0.95,
        delta=1e-6,
        weight_decay=0.01,
        clip_low=clip[0],
        clip_high=clip[1],
    )
    check_against_reference(up, problem, ref)


def make():
    return adam(step_lr(0.02, 0.5, 3), beta1=0.7, beta2=0.9, weight_decay=0.05)


def test_snapshot_restore_is_bit_exact():
    check_snapshot_restore(make, {"w::m", "w::v"})


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("beta1", 1.0, "beta1"),
        ("beta1", -0.1, "beta1"),
        ("beta2", 1.0, "beta2"),
        ("delta", 0.0, "delta"),
        ("delta", -1e-8, "delta"),
    ],
)
def test_config_errors(field, value, match):
    kw = {"delta": value} if field == "delta" else {field: value}
    with pytest.raises(SingaError, match=match) as err:
        adam(fixed_lr(0.1), **kw)
    assert err.value.help


def test_update_is_in_place_and_allocation_free():
    up = adam(fixed_lr(0.01), weight_decay=0.01)
    check_in_place_allocation_free(up)
