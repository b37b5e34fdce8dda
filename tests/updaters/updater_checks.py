"""Checks shared by the updater tests: LR schedules to drive them, the least-squares run
compared step by step with a float64 reference, the bit-exact snapshot/restore round trip
through ParamShard, and the in-place, allocation-free update."""

from __future__ import annotations

import tracemalloc

import numpy as np
from singa_builtins.lr_changes.fixed import FixedLR
from singa_builtins.lr_changes.step import StepLR

from singa_core.schema import job_pb2
from singa_core.stub import ParamShard


def fixed_lr(base_lr):
    return FixedLR(job_pb2.LRGenProto(type=job_pb2.kFixed, base_lr=base_lr))


def step_lr(base_lr, gamma, change_freq):
    conf = job_pb2.LRGenProto(type=job_pb2.kStep, base_lr=base_lr)
    conf.step_conf.gamma = gamma
    conf.step_conf.change_freq = change_freq
    return StepLR(conf)


def _shard(updater, w):
    shard = ParamShard(updater)
    shard.put(0, w, 0, lr_scale=0.5, wd_scale=2.0, num_total=2, num_replicas=2)
    return shard


def _feed(shard, step, g):
    shard.update(0, step, g.copy())
    return shard.update(0, step, (0.5 * g).astype(np.float32))


def check_snapshot_restore(make, state_keys: set[str]) -> None:
    """Four updates, snapshot the shard's state arrays, restore them into a fresh updater
    and continue: values and state equal the uninterrupted ten updates bit for bit, while
    continuing without the history gives different values. ``make()`` builds the
    updater; ``state_keys`` are the snapshot's array names for a param named "w"."""
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
    assert set(snap) == state_keys

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


def check_in_place_allocation_free(up) -> None:
    """After a first update (which may allocate scratch once), an update of a million
    values changes ``w`` in place and allocates less than 64 KB."""
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


class LeastSquares:
    """``0.5·||A w − b||²`` on a fixed 8×3 problem; :meth:`grad` is summed over 2
    "replicas", so the updaters are run with ``scale = 1/2``."""

    def __init__(self) -> None:
        rng = np.random.default_rng(0)
        self.a = rng.standard_normal((8, 3))
        self.b = rng.standard_normal(8)
        self.w0 = np.array([1.0, -1.0, 0.5])

    def grad(self, w):
        return 2 * self.a.T @ (self.a @ w - self.b)

    def loss(self, w) -> float:
        return 0.5 * float(np.sum((self.a @ w - self.b) ** 2))


def check_against_reference(up, problem: LeastSquares, ref, steps: int = 25) -> None:
    """Run ``up`` in float32 from ``problem.w0`` with scale 1/2, lr_scale 0.8 and wd_scale 2
    and compare every step with the float64 reference ``ref``; the loss must fall."""
    w = problem.w0.astype(np.float32)
    state = up.init_state(w)
    for step in range(steps):
        g = problem.grad(w.astype(np.float64)).astype(np.float32)
        up.apply(step, w, g, state, scale=0.5, lr_scale=0.8, wd_scale=2.0)
        np.testing.assert_allclose(w, ref[step], rtol=1e-4, atol=1e-5)
    assert problem.loss(w.astype(np.float64)) < problem.loss(problem.w0)
