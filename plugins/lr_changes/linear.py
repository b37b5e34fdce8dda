"""kLinear: SINGA 0.3's LinearLRGen, linear interpolation from base_lr toward final_lr.

``r = step / change_freq`` (float, rounded to float32 as in 0.3) and
``lr = (1 - r) * base_lr + r * final_lr``. There is no clamping: beyond ``change_freq`` steps
the line is extrapolated (and can go negative), exactly as in 0.3.
"""

from __future__ import annotations

import numpy as np

from singa_core.updater import LRChange

from ._check import f32, require_change_freq, require_set

_EXAMPLE = "change_freq: 1000 final_lr: 0.001"


class LinearLR(LRChange):
    """``lr(step) = (1 - r) * base_lr + r * final_lr`` with ``r = step / change_freq``."""

    type_names = ("kLinear",)

    def __init__(self, conf) -> None:
        super().__init__(conf)
        require_set("kLinear", conf, "linear_conf", "final_lr", _EXAMPLE)
        sub = conf.linear_conf
        self.change_freq = require_change_freq("kLinear", "linear_conf", sub, _EXAMPLE)
        self.final_lr = float(sub.final_lr)

    def __call__(self, step: int) -> float:
        r = float(np.float32(step / self.change_freq))
        return f32((1.0 - r) * self.base_lr + r * self.final_lr)
