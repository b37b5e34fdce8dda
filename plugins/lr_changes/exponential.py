"""kExponential: SINGA 0.3's ExpLRGen (from cuda-convnet).

``lr = base_lr / 2 ^ (step / change_freq)`` with a *float* exponent, so the rate halves
smoothly every ``change_freq`` steps.
"""

from __future__ import annotations

from singa_core.updater import LRChange

from ._check import f32, require_change_freq


class ExponentialLR(LRChange):
    """``lr(step) = base_lr / 2 ** (step / change_freq)``."""

    type_names = ("kExponential",)

    def __init__(self, conf) -> None:
        super().__init__(conf)
        self.change_freq = require_change_freq(
            "kExponential", "exponential_conf", conf.exponential_conf, "change_freq: 1000"
        )

    def __call__(self, step: int) -> float:
        return f32(self.base_lr / 2.0 ** (step / self.change_freq))
