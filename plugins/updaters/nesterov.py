"""kNesterov: SINGA 0.3's NesterovUpdater (src/utils/updater.cc), Nesterov momentum.

With ``g`` the slice's summed gradient, ``s = 1/num_total`` from the server,
``lr = LRGen(step) * lr_scale``, ``wd = weight_decay * wd_scale`` and ``m = momentum``:

1. prologue: clip ``g`` into ``[clip_low, clip_high]`` when ``clip_high > clip_low``;
   ``g <- g * s``; ``g <- g + wd * w`` when ``wd > 0``;
2. ``tmp <- h``; ``h <- m * h + lr * g``; ``w <- w - ((1 + m) * h - m * tmp)``.

This is 0.3's rule exactly (note ``h`` accumulates ``+lr * g``, the opposite sign of kSGD's
history). With ``momentum: 0`` it is plain SGD. Step 2 is done without a copy of ``h``:
``w <- w + m * h`` first, then ``h`` is updated and ``w <- w - (1 + m) * h``; everything is
float32 and in place, nothing is allocated per step.

Deviation: a negative ``momentum`` is rejected at construction (0.3 accepted it).
"""

from __future__ import annotations

import numpy as np

from singa_core.errors import SingaError
from singa_core.updater import Updater, axpy, define_update_kernel

define_update_kernel(
    "nesterov_update",
    """const float ho = T2[j];
const float w = fmaf(momentum, ho, T0[j]);
const float h = fmaf(rate, g, ho * momentum);
T2[j] = h;
T0[j] = fmaf(-(1.0f + momentum), h, w);""",
    states=("history",),
    consts=("momentum",),
    clip=True,
)


class NesterovUpdater(Updater):
    """Nesterov accelerated gradient with history ``h``."""

    type_names = ("kNesterov",)
    update_kernel = "nesterov_update"
    state_names = ("history",)

    def __init__(self, conf, lr) -> None:
        super().__init__(conf, lr)
        if self.momentum < 0:
            raise SingaError(
                f"kNesterov needs updater.momentum >= 0 (got {self.momentum})",
                help="set e.g. `momentum: 0.9` inside updater",
                field="momentum",
            )

    def apply(
        self,
        step: int,
        value: np.ndarray,
        grad: np.ndarray,
        state: dict[str, np.ndarray],
        *,
        scale: float = 1.0,
        lr_scale: float = 1.0,
        wd_scale: float = 1.0,
    ) -> None:
        g = self.prologue(value, grad, scale, wd_scale)
        lr = np.float32(self.lr(step) * lr_scale)
        m = np.float32(self.momentum)
        h = state["history"]
        axpy(m, h, value)  # w <- w + m * tmp   (tmp = the old h)
        h *= m
        axpy(lr, g, h)  # h <- m * h + lr * g
        axpy(-(1 + m), h, value)  # w <- w - (1 + m) * h
