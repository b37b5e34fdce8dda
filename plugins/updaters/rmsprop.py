"""kRMSProp: SINGA 0.3's RMSPropUpdater (src/utils/updater.cc).

With ``g`` the slice's summed gradient, ``s = 1/num_total`` from the server,
``lr = LRGen(step) * lr_scale``, ``wd = weight_decay * wd_scale``, ``rho`` from
``rmsprop_conf`` and ``delta`` the UpdaterProto's ``delta`` (default 1e-8):

1. prologue: clip ``g`` into ``[clip_low, clip_high]`` when ``clip_high > clip_low``;
   ``g <- g * s``; ``g <- g + wd * w`` when ``wd > 0``;
2. ``h <- rho * h + (1 - rho) * g^2``; ``w <- w - lr * g / sqrt(h + delta)`` (epsilon
   inside the root, as 0.3).

0.3 behaviour: ``rho`` is a proto2 ``required`` field of RMSPropProto with no default, so an
``rmsprop_conf`` without it failed to parse, but with no ``rmsprop_conf`` at all 0.3 silently
used ``rho = 0``; ``momentum`` is ignored. (0.1's RMSProp differed: unscaled applied
gradient, no clipping; not followed.)

Deviations: a missing ``rho`` (or ``rmsprop_conf``) is a configuration error at
construction; ``rho`` outside ``[0, 1)`` and ``delta <= 0`` are rejected.

Float32, in place; one scratch array per distinct parameter size is kept by the updater
(allocated on first use, not part of the checkpointed state). Step 2 is the kernel
``rmsprop_step``: on the host one compiled pass over the arrays where numba is installed
(``SINGA_NUMBA=0``, or another device: numpy's seven passes): the same float32
operations but for the rounding of ``rho * h + (1 - rho) * g^2`` (one product and one
sum, where the fallback's saxpy may fuse them).
"""

from __future__ import annotations

import numpy as np

from singa_core.errors import SingaError
from singa_core.jit import Compiled
from singa_core.kernels import define_kernel, kernels_for
from singa_core.memory import NUMBA_COMPILER
from singa_core.updater import Updater, axpy, define_update_kernel

define_update_kernel(
    "rmsprop_update",
    """float h = fmaf(1.0f - rho, g * g, T2[j] * rho);
T2[j] = h;
g = g / sqrtf(h + delta);
T0[j] = fmaf(-rate, g, T0[j]);""",
    states=("history",),
    consts=("rho", "delta"),
    clip=True,
)


class RMSPropUpdater(Updater):
    """RMSProp: running average ``h`` of squared gradients."""

    type_names = ("kRMSProp",)
    update_kernel = "rmsprop_update"
    state_names = ("history",)

    def __init__(self, conf, lr) -> None:
        super().__init__(conf, lr)
        if not (conf.HasField("rmsprop_conf") and conf.rmsprop_conf.HasField("rho")):
            raise SingaError(
                "kRMSProp needs updater.rmsprop_conf.rho, which is not set",
                help="add `rmsprop_conf { rho: 0.9 }` inside updater",
                field="rmsprop_conf",
            )
        self.rho = float(conf.rmsprop_conf.rho)
        if not 0 <= self.rho < 1:
            raise SingaError(
                f"kRMSProp needs 0 <= updater.rmsprop_conf.rho < 1 (got {self.rho})",
                help="rho is the decay of the squared-gradient average, e.g. `rho: 0.9`",
                field="rmsprop_conf.rho",
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
        g = self.prologue(value, grad, scale, wd_scale)
        lr = np.float32(self.lr(step) * lr_scale)
        kernels_for(value).rmsprop_step(
            value, g, state["history"], self.scratch(g), lr, np.float32(self.rho),
            np.float32(self.delta),
        )  # fmt: skip

    def host_compiler_memory(self):
        return NUMBA_COMPILER if _PASS.available() else None


def numpy_step(value, g, h, tmp, lr, rho, delta) -> None:
    """Step 2 in numpy's seven passes (``tmp``: a scratch array shaped like ``g``)."""
    np.multiply(g, g, out=tmp)
    h *= rho
    axpy(1 - rho, tmp, h)  # h <- rho * h + (1 - rho) * g^2
    np.add(h, delta, out=tmp)
    np.sqrt(tmp, out=tmp)
    g /= tmp  # g / sqrt(h + delta)
    axpy(-lr, g, value)


def host_step(value, g, h, tmp, lr, rho, delta) -> None:
    """Step 2 as one compiled pass over C-contiguous float32 arrays; numpy's else."""
    fused = _PASS.get() if _dense(value, g, h) else None
    if fused is None:
        numpy_step(value, g, h, tmp, lr, rho, delta)
        return
    fused(value.reshape(-1), g.reshape(-1), h.reshape(-1), lr, rho, delta)


define_kernel(
    "rmsprop_step",
    host=host_step,
    generic=numpy_step,
    doc="h = rho·h + (1 − rho)·g²; w −= lr·g/√(h + δ) (one slice; one pass on the host)",
)


def _dense(*arrays) -> bool:
    return all(
        isinstance(a, np.ndarray) and a.dtype == np.float32 and a.flags.c_contiguous for a in arrays
    )


def _compile():
    import numba

    one = np.float32(1.0)

    @numba.njit(cache=True, nogil=True, fastmath=False, error_model="numpy")
    def rmsprop_pass(value, g, h, lr, rho, delta):
        """h ← ρ·h + (1 − ρ)·g²; w ← w − lr·g/√(h + δ), one pass."""
        a = one - rho
        for j in range(value.shape[0]):
            gv = g[j]
            hv = h[j] * rho + a * (gv * gv)
            h[j] = hv
            value[j] = value[j] - lr * (gv / np.sqrt(hv + delta))

    return rmsprop_pass


_PASS = Compiled(_compile)
