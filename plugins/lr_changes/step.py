"""kStep: SINGA 0.3's StepLRGen (Caffe's "step" policy).

``lr = base_lr * gamma ^ (step / change_freq)`` where the exponent is an *integer* division
(``int step / int change_freq``), so the rate drops by ``gamma`` every ``change_freq`` steps.
"""

from __future__ import annotations

from singa_core.updater import LRChange

from ._check import f32, require_change_freq


class StepLR(LRChange):
    """``lr(step) = base_lr * gamma ** (step // change_freq)``."""

    type_names = ("kStep",)

    def __init__(self, conf) -> None:
        super().__init__(conf)
        sub = conf.step_conf
        self.change_freq = require_change_freq(
            "kStep", "step_conf", sub, "change_freq: 1000 gamma: 0.1"
        )
        self.gamma = float(sub.gamma)

    def __call__(self, step: int) -> float:
        return f32(self.base_lr * self.gamma ** (int(step) // self.change_freq))
