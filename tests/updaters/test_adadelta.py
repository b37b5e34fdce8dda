"""kAdaDelta closed-form checks: (no clip) -> scale -> weight decay, then AdaDelta.

Expected values are computed here in float64 from SINGA 0.3's formulas (epsilon inside the
square roots, lr kept), not with the implementation under test.
"""

import numpy as np
import pytest
from singa_builtins.updaters.adadelta import AdaDeltaUpdater

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


def adadelta(lr, rho=None, **conf):
    proto = job_pb2.UpdaterProto(type=job_pb2.kAdaDelta, **conf)
    if rho is not None:
        proto.adadelta_conf.rho = rho
    return AdaDeltaUpdater(proto, lr)


def reference(w0, grad_fn, nsteps, *, base_lr, gamma, freq, rho, delta, wd, wd_scale, lr_scale, s):
    """Float64 re-statement of 0.3's kAdaDelta (kStep schedule); no clipping, by design."""
    w = w0.astype(np.float64).copy()
    h = np.zeros_like(w)
    u = np.zeros_like(w)
    out = []
    for step in range(nsteps):
        g = grad_fn(w) * s
        if wd * wd_scale > 0:
            g = g + wd * wd_scale * w
        lr = base_lr * gamma ** (step // freq) * lr_scale
        h = rho * h + (1 - rho) * g * g
        t = g * np.sqrt(u + delta) / np.sqrt(h + delta)
        u = rho * u + (1 - rho) * t * t
        w = w - lr * t
        out.append(w.copy())
    return out


def test_registered_as_kadadelta():
    assert get_host().get("updater", "kAdaDelta") is AdaDeltaUpdater


def test_defaults_and_state():
    up = adadelta(fixed_lr(1.0))
    assert up.rho == pytest.approx(0.9)
    assert up.delta == pytest.approx(1e-8)
    assert up.state_names == ("history", "update")
    state = up.init_state(np.ones((2, 3), np.float32))
    assert set(state) == {"history", "update"}
    assert all(a.shape == (2, 3) and a.dtype == np.float32 and not a.any() for a in state.values())


def test_two_steps_by_hand():
    """Scalar, rho 0.5, delta 0.01, lr 2, g = 1 then 2 (all numbers exact in binary)."""
    up = adadelta(fixed_lr(2.0), rho=0.5, delta=0.01)
    w = np.zeros(1, np.float32)
    state = up.init_state(w)
    up.apply(0, w, np.array([1.0], np.float32), state)
    h1 = 0.5
    t1 = 1.0 * np.sqrt(0.01) / np.sqrt(h1 + 0.01)
    u1 = 0.5 * t1 * t1
    assert float(state["history"][0]) == pytest.approx(h1, rel=1e-6)
    assert float(state["update"][0]) == pytest.approx(u1, rel=1e-5)
    assert float(w[0]) == pytest.approx(-2.0 * t1, rel=1e-5)
    up.apply(1, w, np.array([2.0], np.float32), state)
    h2 = 0.5 * h1 + 0.5 * 4.0
    t2 = 2.0 * np.sqrt(u1 + 0.01) / np.sqrt(h2 + 0.01)
    assert float(state["history"][0]) == pytest.approx(h2, rel=1e-6)
    assert float(state["update"][0]) == pytest.approx(0.5 * u1 + 0.5 * t2 * t2, rel=1e-5)
    assert float(w[0]) == pytest.approx(-2.0 * (t1 + t2), rel=1e-5)


def test_clipping_is_not_applied():
    """0.3's AdaDelta skips the clip; scale and weight decay still apply."""
    up = adadelta(fixed_lr(1.0), rho=0.5, clip_low=-0.1, clip_high=0.1, weight_decay=0.5)
    w = np.ones(1, np.float32)
    state = up.init_state(w)
    up.apply(0, w, np.array([4.0], np.float32), state, scale=0.5, wd_scale=2.0)
    # g = 4 * 0.5 + 0.5 * 2 * 1 = 3 (clipping first would give 0.1 * 0.5 + 1 = 1.05)
    assert float(state["history"][0]) == pytest.approx(4.5)


@pytest.mark.parametrize("clip", [(0.0, 0.0), (-0.5, 0.5)])
def test_least_squares_matches_float64_reference(clip):
    """Caffe-style run on 0.5*||A w - b||^2 with every option on, over 25 steps."""
    problem = LeastSquares()
    opts = dict(
        base_lr=0.5,
        gamma=0.7,
        freq=5,
        rho=0.8,
        delta=1e-4,
        wd=0.01,
        wd_scale=2.0,
        lr_scale=0.8,
        s=0.5,
    )
    ref = reference(problem.w0, problem.grad, 25, **opts)
    assert np.abs(problem.grad(problem.w0) * 0.5).max() > 1.0  # a configured clip would have bitten

    up = adadelta(
        step_lr(0.5, 0.7, 5),
        rho=0.8,
        delta=1e-4,
        weight_decay=0.01,
        clip_low=clip[0],
        clip_high=clip[1],
    )
    check_against_reference(up, problem, ref)


def make():
    return adadelta(step_lr(1.0, 0.5, 3), rho=0.7, delta=1e-4, weight_decay=0.05)


def test_snapshot_restore_is_bit_exact():
    check_snapshot_restore(make, {"w::history", "w::update"})


@pytest.mark.parametrize(
    ("kw", "match"),
    [({"rho": 1.0}, "rho"), ({"rho": -0.5}, "rho"), ({"delta": 0.0}, "delta")],
)
def test_config_errors(kw, match):
    with pytest.raises(SingaError, match=match) as err:
        adadelta(fixed_lr(1.0), **kw)
    assert err.value.help


def test_update_is_in_place_and_allocation_free():
    up = adadelta(fixed_lr(1.0), weight_decay=0.01)
    check_in_place_allocation_free(up)
