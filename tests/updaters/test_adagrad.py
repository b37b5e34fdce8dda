"""kAdaGrad closed-form checks: clip -> scale -> weight decay, then AdaGrad.

Expected values are computed here in float64 from SINGA 0.3's formulas (epsilon inside the
square root), except that the configured ``delta`` is honoured (0.3 always used 1e-8); not
with the implementation under test.
"""

import numpy as np
import pytest
from singa_builtins.updaters.adagrad import AdaGradUpdater

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


def adagrad(lr, **conf):
    return AdaGradUpdater(job_pb2.UpdaterProto(type=job_pb2.kAdaGrad, **conf), lr)


def reference(w0, grad_fn, nsteps, *, base_lr, gamma, freq, delta, wd, wd_scale, lr_scale, s, clip):
    """Float64 re-statement of kAdaGrad (kStep schedule)."""
    w = w0.astype(np.float64).copy()
    h = np.zeros_like(w)
    out = []
    for step in range(nsteps):
        g = grad_fn(w)
        if clip[1] > clip[0]:
            g = np.clip(g, clip[0], clip[1])
        g = g * s
        if wd * wd_scale > 0:
            g = g + wd * wd_scale * w
        lr = base_lr * gamma ** (step // freq) * lr_scale
        h = h + g * g
        w = w - lr * g / np.sqrt(h + delta)
        out.append(w.copy())
    return out


def test_registered_as_kadagrad():
    assert get_host().get("updater", "kAdaGrad") is AdaGradUpdater


def test_state():
    up = adagrad(fixed_lr(0.1))
    assert up.delta == pytest.approx(1e-8)
    assert up.state_names == ("history",)
    state = up.init_state(np.ones((2, 3), np.float32))
    assert set(state) == {"history"} and not state["history"].any()


def test_constant_gradient_closed_form():
    """h_t = t g^2; step t moves lr * g / sqrt(t g^2 + delta)."""
    lr, delta = 0.01, 1e-4
    up = adagrad(fixed_lr(lr), delta=delta)
    g = np.array([0.5, -2.0, 0.0])
    w = np.zeros(3, np.float32)
    state = up.init_state(w)
    expect = np.zeros(3)
    for t in range(1, 9):
        up.apply(t - 1, w, g.astype(np.float32), state)
        h_t = t * g * g
        expect -= lr * g / np.sqrt(h_t + delta)
        np.testing.assert_allclose(state["history"], h_t, rtol=1e-6, atol=0)
        np.testing.assert_allclose(w, expect, rtol=1e-5, atol=1e-7)


def test_configured_delta_is_honoured_inside_the_square_root():
    """Deviation from 0.3 (which always used 1e-8): delta = 0.75 gives 0.5/sqrt(0.25+0.75)."""
    up = adagrad(fixed_lr(1.0), delta=0.75)
    w = np.zeros(1, np.float32)
    up.apply(0, w, np.array([0.5], np.float32), up.init_state(w))
    assert float(w[0]) == pytest.approx(-0.5 / np.sqrt(0.25 + 0.75), rel=1e-6)  # not /1.25


def test_clip_before_scale():
    up = adagrad(fixed_lr(1.0), delta=1.0, clip_low=-1.0, clip_high=1.0)
    w = np.zeros(2, np.float32)
    state = up.init_state(w)
    up.apply(0, w, np.array([3.0, 0.5], np.float32), state, scale=0.5)
    g = np.array([0.5, 0.25])  # clipped to [1, 0.5] first, then * 0.5
    np.testing.assert_allclose(state["history"], g * g, rtol=1e-6)
    np.testing.assert_allclose(w, -g / np.sqrt(g * g + 1.0), rtol=1e-6)


@pytest.mark.parametrize("clip", [(0.0, 0.0), (-3.0, 3.0)])
def test_least_squares_matches_float64_reference(clip):
    """Caffe-style run on 0.5*||A w - b||^2 with every option on, over 25 steps."""
    problem = LeastSquares()
    assert np.abs(problem.grad(problem.w0)).max() > 3.0  # the clip bites
    opts = dict(
        base_lr=0.05,
        gamma=0.7,
        freq=5,
        delta=1e-6,
        wd=0.01,
        wd_scale=2.0,
        lr_scale=0.8,
        s=0.5,
        clip=clip,
    )
    ref = reference(problem.w0, problem.grad, 25, **opts)

    up = adagrad(
        step_lr(0.05, 0.7, 5),
        delta=1e-6,
        weight_decay=0.01,
        clip_low=clip[0],
        clip_high=clip[1],
    )
    check_against_reference(up, problem, ref)


def make():
    return adagrad(step_lr(0.02, 0.5, 3), weight_decay=0.05, clip_low=-1, clip_high=1)


def test_snapshot_restore_is_bit_exact():
    check_snapshot_restore(make, {"w::history"})


def test_momentum_is_ignored():
    a, b = adagrad(fixed_lr(0.1)), adagrad(fixed_lr(0.1), momentum=0.9)
    wa, wb = np.ones(2, np.float32), np.ones(2, np.float32)
    sa, sb = a.init_state(wa), b.init_state(wb)
    for step in range(5):
        a.apply(step, wa, np.array([0.3, -0.2], np.float32), sa)
        b.apply(step, wb, np.array([0.3, -0.2], np.float32), sb)
    np.testing.assert_array_equal(wa, wb)


@pytest.mark.parametrize("delta", [0.0, -1e-8])
def test_delta_must_be_positive(delta):
    with pytest.raises(SingaError, match="delta") as err:
        adagrad(fixed_lr(0.1), delta=delta)
    assert err.value.help


def test_update_is_in_place_and_allocation_free():
    """The scratch array is allocated on the first update only."""
    up = adagrad(fixed_lr(0.01), weight_decay=0.01, clip_low=-1, clip_high=1)
    check_in_place_allocation_free(up)
