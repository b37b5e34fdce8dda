"""kAdaDelta: SINGA 0.3's AdaDeltaUpdater (src/utils/updater.cc).

With ``g`` the slice's summed gradient, ``s = 1/num_total`` from the server,
``lr = LRGen(step) * lr_scale``, ``wd = weight_decay * wd_scale``, ``rho`` from
``adadelta_conf`` (default 0.9) and ``delta`` the UpdaterProto's ``delta`` (default 1e-8):

1. prologue WITHOUT clipping (0.3's AdaDelta never clips; ``clip_low``/``clip_high`` are
   ignored): ``g <- g * s``; ``g <- g + wd * w`` when ``wd > 0``;
2. ``h <- rho * h + (1 - rho) * g^2``;
   ``t <- g * sqrt(u + delta) / sqrt(h + delta)``;
   ``u <- rho * u + (1 - rho) * t^2``;
   ``w <- w - lr * t``  (epsilon inside the roots, as 0.3; 0.3 keeps ``lr``, so use
   ``base_lr: 1`` with kFixed for the paper's rule).

``h`` (state ``history``) averages squared gradients, ``u`` (state ``update``) squared
updates. ``momentum`` is ignored, as in 0.3.

Deviations: ``rho`` outside ``[0, 1)`` and ``delta <= 0`` are rejected at construction.

Float32, in place; one scratch array per distinct parameter size is kept by the updater
(allocated on first use, not part of the checkpointed state).
"""

from __future__ import annotations

import numpy as np

from singa_core.errors import SingaError
from singa_core.updater import Updater, axpy, define_update_kernel

define_update_kernel(
    "adadelta_update",
    """const float h = fmaf(1.0f - rho, g * g, T2[j] * rho);
T2[j] = h;
float t = g * sqrtf(T3[j] + delta);
t = t / sqrtf(h + delta);
T3[j] = fmaf(1.0f - rho, t * t, T3[j] * rho);
T0[j] = fmaf(-rate, t, T0[j]);""",
    states=("history", "update"),
    consts=("rho", "delta"),
    clip=False,
)


class AdaDeltaUpdater(Updater):
    """AdaDelta with squared-gradient average ``h`` and squared-update average ``u``."""

    type_names = ("kAdaDelta",)
    update_kernel = "adadelta_update"
    state_names = ("history", "update")

    def __init__(self, conf, lr) -> None:
        super().__init__(conf, lr)
        self.rho = float(conf.adadelta_conf.rho)
        if not 0 <= self.rho < 1:
            raise SingaError(
                f"kAdaDelta needs 0 <= updater.adadelta_conf.rho < 1 (got {self.rho})",
                help="leave rho out for the default 0.9, or set e.g. `adadelta_conf { rho: 0.95 }`",
                field="adadelta_conf.rho",
            )
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
        g = self.prologue(value, grad, scale, wd_scale, clip=False)
        lr = np.float32(self.lr(step) * lr_scale)
        rho = np.float32(self.rho)
        delta = np.float32(self.delta)
        h, u = state["history"], state["update"]
        tmp = self.scratch(g)
        np.multiply(g, g, out=tmp)
        h *= rho
        axpy(1 - rho, tmp, h)  # h <- rho * h + (1 - rho) * g^2
        np.add(u, delta, out=tmp)
        np.sqrt(tmp, out=tmp)
        g *= tmp  # g * sqrt(u + delta)
        np.add(h, delta, out=tmp)
        np.sqrt(tmp, out=tmp)
        g /= tmp  # t = g * sqrt(u + delta) / sqrt(h + delta)
        np.multiply(g, g, out=tmp)
        u *= rho
        axpy(1 - rho, tmp, u)  # u <- rho * u + (1 - rho) * t^2
        axpy(-lr, g, value)  # w <- w - lr * t
