"""kNesterov closed-form checks: clip -> scale -> weight decay, then Nesterov momentum.

Expected values are computed here in float64 from SINGA 0.3's formulas, not with the
implementation under test.
"""

import tracemalloc

import numpy as np
import pytest

from plugins.lr_changes.fixed import FixedLR
from plugins.lr_changes.step import StepLR
from plugins.updaters.nesterov import NesterovUpdater
from singa_core.errors import SingaError
from singa_core.plugin_host import get_host
from singa_core.schema import job_pb2
from singa_core.stub import ParamShard


def fixed_lr(base_lr):
    return FixedLR(job_pb2.LRGenProto(type=job_pb2.kFixed, base_lr=base_lr))


def step_lr(base_lr, gamma, change_freq):
    conf = job_pb2.LRGenProto(type=job_pb2.kStep, base_lr=base_lr)
    conf.step_conf.gamma = gamma
    conf.step_conf.change_freq = change_freq
    return StepLR(conf)


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
    rng = np.random.default_rng(0)
    a = rng.standard_normal((8, 3))
    b = rng.standard_normal(8)

    def grad_fn(w):
        return 2 * a.T @ (a @ w - b)  # summed over 2 "replicas"; s = 1/2

    w0 = np.array([1.0, -1.0, 0.5])
    assert np.abs(grad_fn(w0)).max() > 3.0  # the clip bites
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
    ref = reference(w0, grad_fn, 25, **opts)

    up = nesterov(
        step_lr(0.05, 0.7, 5),
        momentum=0.9,
        weight_decay=0.01,
        clip_low=clip[0],
        clip_high=clip[1],
    )
    w = w0.astype(np.float32)
    state = up.init_state(w)
    for step in range(25):
        g = grad_fn(w.astype(np.float64)).astype(np.float32)
        up.apply(step, w, g, state, scale=0.5, lr_scale=0.8, wd_scale=2.0)
        np.testing.assert_allclose(w, ref[step], rtol=1e-4, atol=1e-5)
    loss0 = 0.5 * np.sum((a @ w0 - b) ** 2)
    assert 0.5 * np.sum((a @ w.astype(np.float64) - b) ** 2) < loss0


def _shard(updater, w):
    shard = ParamShard(updater)
    shard.put(0, w, 0, lr_scale=0.5, wd_scale=2.0, num_total=2, num_replicas=2)
    return shard


def _feed(shard, step, g):
    shard.update(0, step, g.copy())
    return shard.update(0, step, (0.5 * g).astype(np.float32))


def make():
    return nesterov(
        step_lr(0.02, 0.5, 3), momentum=0.8, weight_decay=0.05, clip_low=-1, clip_high=1
    )


def test_snapshot_restore_is_bit_exact():
    rng = np.random.default_rng(1)
    w0 = rng.standard_normal((4, 3)).astype(np.float32)
    grads = [rng.standard_normal((4, 3)).astype(np.float32) for _ in range(10)]
    names = {0: "w"}

    w_full = w0.copy()
    full = _shard(make(), w_full)
    for step, g in enumerate(grads):
        assert _feed(full, step, g) == step + 1

    w_part = w0.copy()
    part = _shard(make(), w_part)
    for step in range(4):
        _feed(part, step, grads[step])
    snap = {k: v.copy() for k, v in part.state_arrays(names).items()}
    assert set(snap) == {"w::history"}

    w_resumed = w_part.copy()
    resumed = _shard(make(), w_resumed)
    resumed.load_state_arrays(names, snap)
    w_fresh = w_part.copy()
    fresh = _shard(make(), w_fresh)  # same values, history lost
    for step in range(4, 10):
        _feed(resumed, step, grads[step])
        _feed(fresh, step, grads[step])
    np.testing.assert_array_equal(w_resumed, w_full)
    for k, v in full.state_arrays(names).items():
        np.testing.assert_array_equal(resumed.state_arrays(names)[k], v)
    assert not np.array_equal(w_fresh, w_full)  # the history matters


def test_negative_momentum_is_rejected():
    with pytest.raises(SingaError, match="momentum") as err:
        nesterov(fixed_lr(0.1), momentum=-0.5)
    assert "momentum: 0.9" in err.value.help


def test_update_is_in_place_and_allocation_free():
    up = nesterov(fixed_lr(0.01), momentum=0.9, weight_decay=0.01, clip_low=-1, clip_high=1)
    n = 1_000_000
    w = np.ones(n, np.float32)
    g = np.full(n, 0.5, np.float32)
    state = up.init_state(w)
    value_id = id(w)
    up.apply(0, w, g.copy(), state, scale=0.5, lr_scale=2.0, wd_scale=1.0)
    tracemalloc.start()
    try:
        up.apply(1, w, g, state, scale=0.5, lr_scale=2.0, wd_scale=1.0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert id(w) == value_id and w.dtype == np.float32
    assert peak < 64 * 1024
