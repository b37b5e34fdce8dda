"""kAdaGrad: SINGA 0.3's AdaGradUpdater (src/utils/updater.cc).

With ``g`` the slice's summed gradient, ``s = 1/num_total`` from the server,
``lr = LRGen(step) * lr_scale``, ``wd = weight_decay * wd_scale`` and ``delta`` the
UpdaterProto's ``delta`` (default 1e-8):

1. prologue: clip ``g`` into ``[clip_low, clip_high]`` when ``clip_high > clip_low``;
   ``g <- g * s``; ``g <- g + wd * w`` when ``wd > 0``;
2. ``h <- h + g^2``; ``w <- w - lr * g / sqrt(h + delta)`` (epsilon inside the root, as 0.3).

0.3 behaviour: ``delta`` was read from a default-constructed UpdaterProto, so it was always
1e-8 whatever job.conf said; ``momentum`` is ignored.

Deviations: the configured ``delta`` is honoured; ``delta <= 0`` is rejected at
construction (the denominator could be 0 for a never-touched element).

Float32, in place; one scratch array per distinct parameter size is kept by the updater
(allocated on first use, not part of the checkpointed state), so nothing is allocated per
step.
"""

from __future__ import annotations

import numpy as np

from singa_core.updater import Updater, axpy, define_update_kernel

define_update_kernel(
    "adagrad_update",
    """const float h = T2[j] + g * g;
T2[j] = h;
T0[j] = fmaf(-rate, g / sqrtf(h + delta), T0[j]);""",
    states=("history",),
    consts=("delta",),
    clip=True,
)


class AdaGradUpdater(Updater):
    """AdaGrad: per-element rates from the accumulated squared gradients ``h``."""

    type_names = ("kAdaGrad",)
    update_kernel = "adagrad_update"
    state_names = ("history",)

    def __init__(self, conf, lr) -> None:
        super().__init__(conf, lr)
        self.require_positive_delta()

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
        h = state["history"]
        tmp = self.scratch(g)
        np.multiply(g, g, out=tmp)
        h += tmp  # h <- h + g^2
        np.add(h, np.float32(self.delta), out=tmp)
        np.sqrt(tmp, out=tmp)
        g /= tmp  # g / sqrt(h + delta)
        axpy(-lr, g, value)
