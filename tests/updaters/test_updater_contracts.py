"""Every built-in updater type passes the plugin author's kit's updater contract
(``singa_core.testing.check_updater``): snapshot/restore exactness, clipping and coupled
weight decay through ``Updater.prologue``, in-place allocation-free updates. A new built-in
updater needs a configuration here or the coverage test fails."""

from __future__ import annotations

import pytest

from singa_core.plugin_host.host import get_host
from singa_core.testing import check_updater, updater_conf
from singa_core.updater import Updater, axpy

# UpdaterProto text per built-in type (every one uses SINGA's coupled L2 weight decay)
CONFS = {
    "kSGD": "type: kSGD momentum: 0.9",
    "kNesterov": "type: kNesterov momentum: 0.9",
    "kAdaGrad": "type: kAdaGrad",
    "kRMSProp": "type: kRMSProp rmsprop_conf { rho: 0.9 }",
    "kAdaDelta": "type: kAdaDelta adadelta_conf { rho: 0.95 }",
    "kAdam": "type: kAdam",
    "kAdamMax": "type: kAdamMax",
}


def _builtin_updaters() -> dict[str, type]:
    registry = get_host().registries["updater"]
    return {
        name: entry.obj
        for name, entry in registry.entries.items()
        if entry.provider.dist == "singa-classic" and entry.alias_of is None
    }


def test_every_builtin_updater_is_checked():
    assert set(_builtin_updaters()) == set(CONFS)


# 0.3's Adam, AdamMax and AdaDelta never clip (see their modules)
NO_CLIP = {"kAdam", "kAdamMax", "kAdaDelta"}


@pytest.mark.parametrize("name", sorted(CONFS))
def test_updater_contract(name):
    check_updater(name, CONFS[name], weight_decay="coupled", clips=name not in NO_CLIP)


class _DecoupledSGD(Updater):
    """Momentum SGD with decoupled weight decay (SGDW), to exercise the kit's "decoupled"
    mode: ``h <- m h - lr g``; ``w <- w - lr wd w + h``."""

    state_names = ("history",)

    def apply(self, step, value, grad, state, *, scale=1.0, lr_scale=1.0, wd_scale=1.0):
        lr = self.lr(step) * lr_scale
        g = self.prologue(value, grad, scale, wd_scale, weight_decay=False)
        self.decay_weights(value, lr, wd_scale)
        h = state["history"]
        h *= self.momentum
        axpy(-lr, g, h)
        value += h


def test_decoupled_mode_passes_a_decoupled_updater_and_fails_a_coupled_one():
    check_updater(_DecoupledSGD, "momentum: 0.9", weight_decay="decoupled")
    with pytest.raises(AssertionError, match="decoupled weight decay"):
        check_updater("kSGD", "type: kSGD momentum: 0.9", weight_decay="decoupled")
    with pytest.raises(AssertionError, match="coupled weight decay"):
        check_updater(_DecoupledSGD, "momentum: 0.9", weight_decay="coupled")


def test_clipping_check_catches_an_updater_that_ignores_clip():
    class NoClip(_DecoupledSGD):
        def prologue(self, value, grad, scale, wd_scale, clip=True, weight_decay=True):
            return super().prologue(value, grad, scale, wd_scale, False, weight_decay)

    with pytest.raises(AssertionError, match="clip"):
        check_updater(NoClip, "momentum: 0.9", weight_decay="decoupled")
    assert updater_conf("clip_low: -1 clip_high: 1").clip_high == 1
