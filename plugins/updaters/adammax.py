"""kAdamMax: SINGA 0.3's AdamMaxUpdater (src/utils/updater.cc), with 0.3's delta bug fixed.

With ``g`` the slice's summed gradient, ``s = 1/num_total`` from the server,
``lr = LRGen(step) * lr_scale``, ``wd = weight_decay * wd_scale``, ``beta1``/``beta2`` from
``adammax_conf`` (defaults 0.9 / 0.999) and ``delta`` the UpdaterProto's ``delta``
(default 1e-8):

1. prologue WITHOUT clipping (0.3's AdamMax never clips; ``clip_low``/``clip_high`` are
   ignored): ``g <- g * s``; ``g <- g + wd * w`` when ``wd > 0``;
2. ``m <- beta1 * m + (1 - beta1) * g``; ``u <- max(beta2 * u, |g|)``;
   ``w <- w - lr * m / (u + delta)``.

0.3 behaviour: ``u <- max(beta2 * u, |g|) + delta`` and ``w <- w - lr * m / u``, i.e. delta
was added into the stored ``u`` every step, where it accumulates (up to
``delta / (1 - beta2)``). No bias correction, as 0.3 (and as kAdam). ``momentum`` is ignored.

Deviations: ``u`` is the plain exponentially weighted infinity norm and ``delta`` is added
only in the denominator (the AdaMax paper's rule with an epsilon), so ``u`` does not drift;
``beta1`` outside ``[0, 1)``, ``beta2`` outside ``[0, 1]`` and ``delta <= 0`` are rejected at
construction.

Float32, in place; the server's gradient buffer is the only scratch, nothing is allocated
per step.
"""

from __future__ import annotations

import numpy as np

from singa_core.errors import SingaError
from singa_core.updater import Updater, axpy, define_update_kernel

define_update_kernel(
    "adammax_update",
    """const float m = fmaf(1.0f - beta1, g, T2[j] * beta1);
T2[j] = m;
const float a = T3[j] * beta2;
const float b = fabsf(g);
const float u = (a != a || b != b) ? a + b : (a > b ? a : b);
T3[j] = u;
T0[j] = fmaf(-rate, m / (u + delta), T0[j]);""",
    states=("m", "u"),
    consts=("beta1", "beta2", "delta"),
    clip=False,
)


class AdamMaxUpdater(Updater):
    """AdaMax with first moment ``m`` and exponentially weighted infinity norm ``u``."""

    type_names = ("kAdamMax",)
    update_kernel = "adammax_update"
    state_names = ("m", "u")

    def __init__(self, conf, lr) -> None:
        super().__init__(conf, lr)
        self.beta1 = float(conf.adammax_conf.beta1)
        self.beta2 = float(conf.adammax_conf.beta2)
        if not (0 <= self.beta1 < 1 and 0 <= self.beta2 <= 1):
            raise SingaError(
                "kAdamMax needs 0 <= updater.adammax_conf.beta1 < 1 and 0 <= beta2 <= 1 "
                f"(got beta1 {self.beta1}, beta2 {self.beta2})",
                help="leave them out for the defaults, or set e.g. "
                "`adammax_conf { beta1: 0.9 beta2: 0.999 }`",
                field="adammax_conf.beta1" if not 0 <= self.beta1 < 1 else "adammax_conf.beta2",
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
        b1 = np.float32(self.beta1)
        m, u = state["m"], state["u"]
        m *= b1
        axpy(1 - b1, g, m)  # m <- beta1 * m + (1 - beta1) * g
        np.abs(g, out=g)  # g is the server's buffer: reuse it as scratch
        u *= np.float32(self.beta2)
        np.maximum(u, g, out=u)  # u <- max(beta2 * u, |g|)
        np.add(u, np.float32(self.delta), out=g)
        np.divide(m, g, out=g)  # m / (u + delta)
        axpy(-lr, g, value)
