"""kSGD: SINGA 0.3's SGDUpdater (src/utils/updater.cc), plain or with momentum.

With ``g`` the slice's summed gradient, ``s = 1/num_total`` from the server,
``lr = LRGen(step) * lr_scale`` and ``wd = weight_decay * wd_scale``:

1. prologue: clip ``g`` into ``[clip_low, clip_high]`` when ``clip_high > clip_low``;
   ``g <- g * s``; ``g <- g + wd * w`` when ``wd > 0``;
2. if ``momentum > 0``: ``h <- momentum * h - lr * g``; ``w <- w + h``;
   else: ``w <- w - lr * g``.

Everything is float32 and done in place with fused BLAS passes (``axpy``); nothing is
allocated per step. On a GPU a step's slices are updated together by the kernel
``sgd_update``: one launch for all of them.
"""

from __future__ import annotations

import functools

import numpy as np

from singa_core.cuda import CUPY, launch_multi_tensor, multi_tensor_source
from singa_core.kernels import define_kernel, kernels_for
from singa_core.updater import Updater, axpy


def _sgd_one(value, grad, history, lr, wd, scale, momentum, clip_low, clip_high) -> None:
    """One slice: SINGA's prologue (clip, scale, coupled weight decay), then the rule."""
    if clip_high > clip_low:
        np.clip(grad, clip_low, clip_high, out=grad)
    if scale != 1.0:
        grad *= np.float32(scale)
    if wd > 0:
        axpy(wd, value, grad)
    if momentum > 0:
        history *= np.float32(momentum)
        axpy(-lr, grad, history)  # h <- momentum * h - lr * g
        axpy(1.0, history, value)  # w <- w + h
    else:
        axpy(-lr, grad, value)  # w <- w - lr * g


def sgd_update_host(
    values, grads, histories, lr, lr_scales, wds, scales, momentum, clip_low, clip_high
) -> None:
    """SGD over many slices: ``values[i]`` updated in place from ``grads[i]`` (used as
    scratch) and ``histories[i]`` (None without momentum); ``lr`` the step's base rate,
    per slice its ``lr_scales``, weight decays ``wds`` and gradient ``scales``."""
    for i, (w, g) in enumerate(zip(values, grads, strict=True)):
        h = histories[i] if histories is not None else None
        lr_i = np.float32(lr * lr_scales[i])
        _sgd_one(w, g, h, lr_i, wds[i], scales[i], momentum, clip_low, clip_high)


_SGD_SOURCE = multi_tensor_source(
    "singa_sgd",
    tensors=3,  # value, gradient, history
    params=3,  # lr_scale, weight decay, gradient scale
    scalars="double lr, float momentum, float clip_low, float clip_high, int clip",
    body="""
float g = T1[j];
if (clip) g = fminf(fmaxf(g, clip_low), clip_high);
if (P2 != 1.0f) g *= P2;
if (P1 > 0.0f) g = fmaf(P1, T0[j], g);
T1[j] = g;
const float rate = (float)(lr * (double)P0);
if (momentum > 0.0f) {
  const float h = fmaf(-rate, g, T2[j] * momentum);
  T2[j] = h;
  T0[j] = T0[j] + h;
} else {
  T0[j] = fmaf(-rate, g, T0[j]);
}
""",
)


def sgd_update_cuda(
    values, grads, histories, lr, lr_scales, wds, scales, momentum, clip_low, clip_high, rt=CUPY
) -> None:
    launch_multi_tensor(
        rt,
        _SGD_SOURCE,
        "singa_sgd",
        [values, grads, histories if histories is not None else values],
        [lr_scales, wds, scales],
        (
            np.float64(lr),
            np.float32(momentum),
            np.float32(clip_low),
            np.float32(clip_high),
            np.int32(clip_high > clip_low),
        ),
    )


define_kernel(
    "sgd_update",
    host=sgd_update_host,
    cuda=functools.partial(sgd_update_cuda, rt=CUPY),
    doc="kSGD's step over many slices (one launch on a GPU)",
)


class SGDUpdater(Updater):
    """Stochastic gradient descent with optional (heavy-ball) momentum history ``h``."""

    type_names = ("kSGD",)
    state_names = ("history",)

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
        g = self.prologue(value, grad, scale, wd_scale)
        lr = np.float32(self.lr(step) * lr_scale)
        if self.momentum > 0:
            h = state["history"]
            h *= np.float32(self.momentum)
            axpy(-lr, g, h)  # h <- momentum * h - lr * g
            axpy(1.0, h, value)  # w <- w + h
        else:
            axpy(-lr, g, value)  # w <- w - lr * g

    def apply_many(self, step, items) -> None:
        kernels_for(items[0].value).sgd_update(
            [it.value for it in items],
            [it.grad for it in items],
            [it.state["history"] for it in items] if self.momentum > 0 else None,
            self.lr(step),
            [it.lr_scale for it in items],
            [self.weight_decay * it.wd_scale for it in items],
            [it.scale for it in items],
            self.momentum,
            self.clip_low,
            self.clip_high,
        )
