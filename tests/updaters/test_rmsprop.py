"""kRMSProp closed-form checks: clip -> scale -> weight decay, then RMSProp.

Expected values are computed here in float64 from SINGA 0.3's formulas (epsilon inside the
square root), not with the implementation under test.
"""

import numpy as np
import pytest
from singa_builtins.updaters.rmsprop import RMSPropUpdater

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


@pytest.fixture(autouse=True, params=["compiled", "numpy"])
def host_path(request, monkeypatch):
    """Every check runs on both host paths: the compiled pass (numba) and numpy's passes
    (``SINGA_NUMBA=0``, as without numba)."""
    if request.param == "compiled":
        pytest.importorskip("numba")
    monkeypatch.setenv("SINGA_NUMBA", "1" if request.param == "compiled" else "0")
    return request.param


def rmsprop(lr, rho=0.9, **conf):
    proto = job_pb2.UpdaterProto(type=job_pb2.kRMSProp, **conf)
    if rho is not None:
        proto.rmsprop_conf.rho = rho
    return RMSPropUpdater(proto, lr)


def reference(
    w0, grad_fn, nsteps, *, base_lr, gamma, freq, rho, delta, wd, wd_scale, lr_scale, s, clip
):
    """Float64 re-statement of 0.3's kRMSProp (kStep schedule)."""
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
        h = rho * h + (1 - rho) * g * g
        w = w - lr * g / np.sqrt(h + delta)
        out.append(w.copy())
    return out


def test_registered_as_krmsprop():
    assert get_host().get("updater", "kRMSProp") is RMSPropUpdater


def test_state():
    up = rmsprop(fixed_lr(0.1), rho=0.5)
    assert up.rho == 0.5 and up.delta == pytest.approx(1e-8)
    assert up.state_names == ("history",)
    state = up.init_state(np.ones((2, 3), np.float32))
    assert set(state) == {"history"} and not state["history"].any()


def test_constant_gradient_closed_form():
    """h_t = g^2 (1 - rho^t); step t moves lr * g / sqrt(h_t + delta)."""
    lr, rho, delta = 0.01, 0.8, 1e-4
    up = rmsprop(fixed_lr(lr), rho=rho, delta=delta)
    g = np.array([0.5, -2.0, 0.0])
    w = np.zeros(3, np.float32)
    state = up.init_state(w)
    expect = np.zeros(3)
    for t in range(1, 9):
        up.apply(t - 1, w, g.astype(np.float32), state)
        h_t = g * g * (1 - rho**t)
        expect -= lr * g / np.sqrt(h_t + delta)
        np.testing.assert_allclose(state["history"], h_t, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(w, expect, rtol=1e-5, atol=1e-7)


def test_delta_is_inside_the_square_root():
    up = rmsprop(fixed_lr(1.0), rho=0.0, delta=0.75)
    w = np.zeros(1, np.float32)
    up.apply(0, w, np.array([0.5], np.float32), up.init_state(w))
    assert float(w[0]) == pytest.approx(-0.5 / np.sqrt(0.25 + 0.75), rel=1e-6)  # not /1.25


def test_clip_before_scale():
    up = rmsprop(fixed_lr(1.0), rho=0.0, delta=1.0, clip_low=-1.0, clip_high=1.0)
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
        rho=0.8,
        delta=1e-6,
        wd=0.01,
        wd_scale=2.0,
        lr_scale=0.8,
        s=0.5,
        clip=clip,
    )
    ref = reference(problem.w0, problem.grad, 25, **opts)

    up = rmsprop(
        step_lr(0.05, 0.7, 5),
        rho=0.8,
        delta=1e-6,
        weight_decay=0.01,
        clip_low=clip[0],
        clip_high=clip[1],
    )
    check_against_reference(up, problem, ref)


def make():
    return rmsprop(step_lr(0.02, 0.5, 3), rho=0.9, weight_decay=0.05, clip_low=-1, clip_high=1)


def test_snapshot_restore_is_bit_exact():
    check_snapshot_restore(make, {"w::history"})


def test_rho_is_required():
    with pytest.raises(SingaError, match="rmsprop_conf.rho") as err:
        rmsprop(fixed_lr(0.1), rho=None)
    assert "rmsprop_conf { rho:" in err.value.help
    proto = job_pb2.UpdaterProto(type=job_pb2.kRMSProp)
    proto.rmsprop_conf.SetInParent()  # an empty rmsprop_conf {} is no better
    with pytest.raises(SingaError, match="rho"):
        RMSPropUpdater(proto, fixed_lr(0.1))


def test_rho_zero_is_accepted():
    assert rmsprop(fixed_lr(0.1), rho=0.0).rho == 0.0


@pytest.mark.parametrize(
    ("kw", "match"),
    [({"rho": 1.0}, "rho"), ({"rho": -0.5}, "rho"), ({"delta": 0.0}, "delta")],
)
def test_config_errors(kw, match):
    with pytest.raises(SingaError, match=match) as err:
        rmsprop(fixed_lr(0.1), **kw)
    assert err.value.help


def test_update_is_in_place_and_allocation_free():
    """The scratch array is allocated on the first update only."""
    up = rmsprop(fixed_lr(0.01), weight_decay=0.01, clip_low=-1, clip_high=1)
    check_in_place_allocation_free(up)


def test_both_host_paths_agree_to_rounding(host_path, monkeypatch):
    """The compiled pass and numpy's passes give the same update but for float32 rounding."""
    pytest.importorskip("numba")
    rng = np.random.default_rng(3)
    w0 = rng.standard_normal(10_001).astype(np.float32)
    grads = [rng.standard_normal(w0.size).astype(np.float32) * 3 for _ in range(4)]
    out = {}
    for flag in ("1", "0"):
        monkeypatch.setenv("SINGA_NUMBA", flag)
        up = rmsprop(fixed_lr(0.01), rho=0.9, clip_low=-2, clip_high=2)
        w, state = w0.copy(), {"history": np.zeros_like(w0)}
        for step, g in enumerate(grads):
            up.apply(step, w, g.copy(), state)
        out[flag] = w, state["history"]
    for a, b in zip(out["1"], out["0"], strict=True):
        np.testing.assert_allclose(a, b, rtol=2e-6, atol=1e-7)
