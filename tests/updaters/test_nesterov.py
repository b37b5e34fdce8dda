"""kNesterov closed-form checks: clip -> scale -> weight decay, then Nesterov momentum.

Expected values are computed here in float64 from SINGA 0.3's formulas, not with the
implementation under test.
"""

import numpy as np
import pytest
from singa_builtins.updaters.nesterov import NesterovUpdater

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


def nesterov(lr, **conf):
    return NesterovUpdater(job_pb2.UpdaterProto(type=job_pb2.kNesterov, **conf), lr)


def reference(w0, grad_fn, nsteps, *, base_lr, gamma, freq, mom, wd, wd_scale, lr_scale, s, clip):
    """Float64 re-statement of 0.3's kNesterov (kStep schedule)."""
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
        tmp = h
        h = mom * h + lr * g
        w = w - ((1 + mom) * h - mom * tmp)
        out.append(w.copy())
    return out


def test_registered_as_knesterov():
    assert get_host().get("updater", "kNesterov") is NesterovUpdater


def test_state():
    up = nesterov(fixed_lr(0.1), momentum=0.9)
    assert up.state_names == ("history",)
    state = up.init_state(np.ones((2, 3), np.float32))
    assert set(state) == {"history"} and not state["history"].any()


def test_constant_gradient_closed_form():
    """h_t = lr g (1 - m^t)/(1 - m); w_t = w_{t-1} - ((1 + m) h_t - m h_{t-1})."""
    lr, mom = 0.1, 0.9
    up = nesterov(fixed_lr(lr), momentum=mom)
    g = np.array([0.5, -2.0, 0.0])
    w = np.zeros(3, np.float32)
    state = up.init_state(w)
    expect = np.zeros(3)
    for t in range(1, 11):
        up.apply(t - 1, w, g.astype(np.float32), state)
        h_t = lr * g * (1 - mom**t) / (1 - mom)
        h_prev = lr * g * (1 - mom ** (t - 1)) / (1 - mom)
        expect -= (1 + mom) * h_t - mom * h_prev
        np.testing.assert_allclose(state["history"], h_t, rtol=2e-6, atol=1e-7)
        np.testing.assert_allclose(w, expect, rtol=2e-6, atol=1e-7)


def test_zero_momentum_is_plain_sgd():
    up = nesterov(fixed_lr(0.5))
    w = np.array([1.0, -2.0], np.float32)
    state = up.init_state(w)
    for step in range(3):
        up.apply(step, w, np.array([0.5, 1.0], np.float32), state)
    np.testing.assert_allclose(w, [1.0 - 0.75, -2.0 - 1.5], rtol=1e-6)


def test_clip_before_scale():
    up = nesterov(fixed_lr(1.0), momentum=0.5, clip_low=-1.0, clip_high=1.0)
    w = np.zeros(2, np.float32)
    state = up.init_state(w)
    up.apply(0, w, np.array([3.0, 0.5], np.float32), state, scale=0.5)
    g = np.array([0.5, 0.25])  # clipped to [1, 0.5] first, then * 0.5
    np.testing.assert_allclose(state["history"], g, rtol=1e-6)  # h = lr * g
    np.testing.assert_allclose(w, -1.5 * g, rtol=1e-6)  # (1 + m) * h - m * 0


@pytest.mark.parametrize("clip", [(0.0, 0.0), (-3.0, 3.0)])
def test_least_squares_matches_float64_reference(clip):
    """Caffe-style run on 0.5*||A w - b||^2 with every option on, over 25 steps."""
    problem = LeastSquares()
    assert np.abs(problem.grad(problem.w0)).max() > 3.0  # the clip bites
    opts = dict(
        base_lr=0.05,
        gamma=0.7,
        freq=5,
        mom=0.9,
        wd=0.01,
        wd_scale=2.0,
        lr_scale=0.8,
        s=0.5,
        clip=clip,
    )
    ref = reference(problem.w0, problem.grad, 25, **opts)

    up = nesterov(
        step_lr(0.05, 0.7, 5),
        momentum=0.9,
        weight_decay=0.01,
        clip_low=clip[0],
        clip_high=clip[1],
    )
    check_against_reference(up, problem, ref)


def make():
    return nesterov(
        step_lr(0.02, 0.5, 3), momentum=0.8, weight_decay=0.05, clip_low=-1, clip_high=1
    )


def test_snapshot_restore_is_bit_exact():
    check_snapshot_restore(make, {"w::history"})


def test_negative_momentum_is_rejected():
    with pytest.raises(SingaError, match="momentum") as err:
        nesterov(fixed_lr(0.1), momentum=-0.5)
    assert "momentum: 0.9" in err.value.help


def test_update_is_in_place_and_allocation_free():
    up = nesterov(fixed_lr(0.01), momentum=0.9, weight_decay=0.01, clip_low=-1, clip_high=1)
    check_in_place_allocation_free(up)
