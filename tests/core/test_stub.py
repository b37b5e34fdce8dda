"""The server side of the seam: aggregation, averaging, versions (SINGA 0.3 §5.4-5.5)."""

from __future__ import annotations

import numpy as np

from singa_core.stub import ParamShard
from singa_core.updater import LRChange, Updater


class Fixed(LRChange):
    def __call__(self, step):
        return self.base_lr


class PlainSGD(Updater):
    def apply(self, step, value, grad, state, *, scale=1.0, lr_scale=1.0, wd_scale=1.0):
        g = self.prologue(value, grad, scale, wd_scale)
        value -= np.float32(self.lr(step) * lr_scale) * g


def updater(**kw):
    from singa_core.schema import job_pb2

    conf = job_pb2.UpdaterProto(**kw)
    conf.learning_rate.base_lr = 0.5
    return PlainSGD(conf, Fixed(conf.learning_rate))


def test_single_contribution_applies_at_once():
    shard = ParamShard(updater())
    w = np.ones(3, np.float32)
    shard.put(0, w, 0, lr_scale=1.0, wd_scale=1.0)
    assert shard.update(0, 0, np.full(3, 2, np.float32)) == 1
    np.testing.assert_allclose(w, 1 - 0.5 * 2)


def test_shares_are_summed_and_replicas_averaged():
    shard = ParamShard(updater())
    w = np.zeros(2, np.float32)
    # 4 contributions: 2 data-parallel replicas x 2 share_from sharers each
    shard.put(7, w, 10, lr_scale=2.0, wd_scale=1.0, num_total=4, num_replicas=2)
    for g in ([1, 1], [2, 2], [3, 3]):
        assert shard.update(7, 10, np.array(g, np.float32)) is None
    np.testing.assert_array_equal(w, 0)  # nothing applied before all arrived
    assert shard.update(7, 10, np.array([4, 4], np.float32)) == 11
    # sum 10, averaged over 2 replicas = 5, lr 0.5 * lr_scale 2
    np.testing.assert_allclose(w, -5.0)
    # the next round starts afresh
    for g in ([1, 0], [1, 0], [1, 0], [1, 0]):
        v = shard.update(7, 11, np.array(g, np.float32))
    assert v == 12
    np.testing.assert_allclose(w, [-5 - 2.0, -5.0])


def test_clip_before_scale_and_weight_decay_after():
    shard = ParamShard(updater(clip_low=-1, clip_high=1, weight_decay=0.1))
    w = np.full(2, 2.0, np.float32)
    shard.put(0, w, 0, lr_scale=1.0, wd_scale=1.0, num_total=2, num_replicas=2)
    shard.update(0, 0, np.array([3, -0.5], np.float32))
    shard.update(0, 0, np.array([3, -0.5], np.float32))
    # sum [6, -1] -> clip [1, -1] -> * 1/2 -> [0.5, -0.5] -> + 0.1*2 -> [0.7, -0.3]
    np.testing.assert_allclose(w, 2 - 0.5 * np.array([0.7, -0.3]), rtol=1e-6)


def test_state_arrays_roundtrip():
    from singa_core.schema import job_pb2

    conf = job_pb2.UpdaterProto(momentum=0.9)

    class WithHistory(PlainSGD):
        state_names = ("history",)

    shard = ParamShard(WithHistory(conf, Fixed(conf.learning_rate)))
    shard.put(3, np.zeros(4, np.float32), 0, lr_scale=1, wd_scale=1)
    shard.entries[3].state["history"][:] = 5
    saved = {k: v.copy() for k, v in shard.state_arrays({3: "0#w"}).items()}
    assert list(saved) == ["0#w::history"]
    shard.entries[3].state["history"][:] = 0
    shard.load_state_arrays({3: "0#w"}, saved)
    np.testing.assert_array_equal(shard.entries[3].state["history"], 5)


def test_a_zero_contribution_is_counted_unread():
    """``None`` (Param.zero_grad): counted towards the update, never read or added; the
    other contributions give the sum alone, and all-zero still applies the rule (decay)."""
    for order in ((None, "g"), ("g", None), (None, None)):
        shard = ParamShard(updater(weight_decay=0.1))
        w = np.ones(3, np.float32)
        shard.put(0, w, 0, lr_scale=1.0, wd_scale=1.0, num_total=2)
        g = np.full(3, 2, np.float32)
        grads = [g.copy() if x == "g" else None for x in order]
        assert shard.update(0, 0, grads[0]) is None
        assert shard.update(0, 0, grads[1]) == 1
        want = 1 - 0.5 * ((2 if "g" in order else 0) + 0.1)
        np.testing.assert_allclose(w, want, rtol=1e-6, err_msg=str(order))
