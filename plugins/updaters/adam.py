"""kAdam: SINGA 0.3's AdamUpdater (src/utils/updater.cc), without bias correction.

With ``g`` the slice's summed gradient, ``s = 1/num_total`` from the server,
``lr = LRGen(step) * lr_scale``, ``wd = weight_decay * wd_scale``, ``beta1``/``beta2`` from
``adam_conf`` (defaults 0.9 / 0.999) and ``delta`` the UpdaterProto's ``delta`` (default
1e-8):

1. prologue WITHOUT clipping (0.3's Adam never clips; ``clip_low``/``clip_high`` are
   ignored): ``g <- g * s``; ``g <- g + wd * w`` when ``wd > 0``;
2. ``m <- beta1 * m + (1 - beta1) * g``; ``v <- beta2 * v + (1 - beta2) * g^2``;
   ``w <- w - lr * m / sqrt(v + delta)``  (epsilon inside the root, as 0.3).

No bias correction: this is 0.3's documented rule, kept on purpose (not a bug to fix), so
early steps are smaller than in the Adam paper / PyTorch (which also put epsilon outside
the root). Weight decay is added to the gradient (L2), not decoupled. ``momentum`` is
ignored, as in 0.3.

Deviations: ``beta1``/``beta2`` outside ``[0, 1)`` and ``delta <= 0`` are rejected at
construction.

Float32, in place; the server's gradient buffer is the only scratch, nothing is allocated
per step.
"""

from __future__ import annotations

import numpy as np

from singa_core.errors import SingaError
from singa_core.updater import Updater, axpy, define_update_kernel

define_update_kernel(
    "adam_update",
    """const float m = fmaf(1.0f - beta1, g, T2[j] * beta1);
T2[j] = m;
const float v = fmaf(1.0f - beta2, g * g, T3[j] * beta2);
T3[j] = v;
T0[j] = fmaf(-rate, m / sqrtf(v + delta), T0[j]);""",
    states=("m", "v"),
    consts=("beta1", "beta2", "delta"),
    clip=False,
)


class AdamUpdater(Updater):
    """Adam (0.3 flavour) with first moment ``m`` and second moment ``v``."""

    type_names = ("kAdam",)
    update_kernel = "adam_update"
    state_names = ("m", "v")

    def __init__(self, conf, lr) -> None:
        super().__init__(conf, lr)
        self.beta1 = float(conf.adam_conf.beta1)
        self.beta2 = float(conf.adam_conf.beta2)
        for name, b in (("beta1", self.beta1), ("beta2", self.beta2)):
            if not 0 <= b < 1:
                raise SingaError(
                    f"kAdam needs 0 <= updater.adam_conf.{name} < 1 (got {b})",
                    help="leave it out for the defaults, or set e.g. "
                    "`adam_conf { beta1: 0.9 beta2: 0.999 }`",
                    field=f"adam_conf.{name}",
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
        b1, b2 = np.float32(self.beta1), np.float32(self.beta2)
        m, v = state["m"], state["v"]
        m *= b1
        axpy(1 - b1, g, m)  # m <- beta1 * m + (1 - beta1) * g
        np.multiply(g, g, out=g)  # g is the server's buffer: reuse it as scratch
        v *= b2
        axpy(1 - b2, g, v)  # v <- beta2 * v + (1 - beta2) * g^2
        np.add(v, np.float32(self.delta), out=g)
        np.sqrt(g, out=g)
        np.divide(m, g, out=g)  # m / sqrt(v + delta)
        axpy(-lr, g, value)
