"""kInverse: SINGA 0.3's InvLRGen (Caffe's "inv" policy).

``lr = base_lr * (1 + gamma * step) ^ (-pow)``; ``1 + gamma * step`` is computed in float32
as in 0.3. ``inverse_conf`` defaults to ``gamma = 1, pow = 0`` (a constant rate).
"""

from __future__ import annotations

import numpy as np

from singa_core.errors import SingaError
from singa_core.updater import LRChange

from ._check import f32


class InverseLR(LRChange):
    """``lr(step) = base_lr * (1 + gamma * step) ** -pow``."""

    type_names = ("kInverse",)

    def __init__(self, conf) -> None:
        super().__init__(conf)
        self.gamma = float(conf.inverse_conf.gamma)
        self.pow = float(conf.inverse_conf.pow)
        if self.gamma < 0:
            raise SingaError(
                f"kInverse needs learning_rate.inverse_conf.gamma >= 0 (got {self.gamma})",
                help="the rate is base_lr * (1 + gamma * step) ^ (-pow); "
                "use e.g. `inverse_conf { gamma: 0.0001 pow: 0.75 }`",
                field="inverse_conf.gamma",
            )

    def __call__(self, step: int) -> float:
        base = np.float32(1.0) + np.float32(self.gamma) * np.float32(step)
        return f32(self.base_lr * float(base) ** (-self.pow))
