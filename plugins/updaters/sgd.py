"""kSGD: SINGA 0.3's SGDUpdater (src/utils/updater.cc), plain or with momentum.

With ``g`` the slice's summed gradient, ``s = 1/num_total`` from the server,
``lr = LRGen(step) * lr_scale`` and ``wd = weight_decay * wd_scale``:

1. prologue: clip ``g`` into ``[clip_low, clip_high]`` when ``clip_high > clip_low``;
   ``g <- g * s``; ``g <- g + wd * w`` when ``wd > 0``;
2. if ``momentum > 0``: ``h <- momentum * h - lr * g``; ``w <- w + h``;
   else: ``w <- w - lr * g``.

Everything is float32 and done in place; nothing is allocated per step. With momentum
the steps after the clip run as the kernel ``sgd_momentum_step``: one
pass on the host (:mod:`~singa_builtins.updaters._momentum_step`), which leaves ``g`` as
it was sent; otherwise fused BLAS passes (``axpy``). On a GPU a step's slices are updated
together by the kernel ``sgd_update`` (:func:`singa_core.updater.define_update_kernel`):
one launch for all of them.
"""

from __future__ import annotations

import numpy as np
from singa_builtins.updaters._momentum_step import compiles, host_step, numpy_step

from singa_core.kernels import define_kernel, kernels_for
from singa_core.memory import NUMBA_COMPILER
from singa_core.updater import Updater, axpy, define_update_kernel

define_update_kernel(
    "sgd_update",
    """
T1[j] = g;
if (momentum > 0.0f) {
  const float h = fmaf(-rate, g, T2[j] * momentum);
  T2[j] = h;
  T0[j] = T0[j] + h;
} else {
  T0[j] = fmaf(-rate, g, T0[j]);
}
""",
    states=("history",),
    consts=("momentum",),
    doc="kSGD's step over many slices (one launch on a GPU)",
)

define_kernel(
    "sgd_momentum_step",
    host=host_step,
    generic=numpy_step,
    doc="h = m·h − lr·(s·g + wd·w); w += h (one slice; one pass on the host)",
)


class SGDUpdater(Updater):
    """Stochastic gradient descent with optional (heavy-ball) momentum history ``h``."""

    type_names = ("kSGD",)
    state_names = ("history",)
    update_kernel = "sgd_update"

    def __init__(self, conf, lr) -> None:
        super().__init__(conf, lr)
        if self.momentum <= 0:
            self.state_names = ()  # the history is kept only when momentum uses it

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
        lr = np.float32(self.lr(step) * lr_scale)
        if self.momentum > 0:
            # the prologue's clip here; its scale and decay in the step's one pass
            g = self.prologue(value, grad, 1.0, wd_scale, weight_decay=False)
            kernels_for(value).sgd_momentum_step(
                value, g, state["history"], scale, self.weight_decay * wd_scale, lr,
                self.momentum,
            )  # fmt: skip
            return
        g = self.prologue(value, grad, scale, wd_scale)
        axpy(-lr, g, value)  # w <- w - lr * g

    def host_compiler_memory(self):
        if self.momentum > 0 and compiles():  # the momentum step is compiled with numba
            return NUMBA_COMPILER
        return None

    def fold(self, step, *, scale=1.0, lr_scale=1.0, wd_scale=1.0):
        # plain SGD is w <- w - lr*(s*g + wd*w) = (1 - lr*wd)*w + (-lr*s)*g
        if self.momentum > 0 or self.clip_high > self.clip_low:
            return None
        lr = float(np.float32(self.lr(step) * lr_scale))
        wd = self.weight_decay * wd_scale
        return -lr * scale, (1.0 - lr * wd) if wd > 0 else 1.0
