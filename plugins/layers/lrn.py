"""kLRN (alias kCudnnLRN): local response normalisation across channels (SINGA 0.3 §2.3).

For a ``[B, C, H, W]`` source, with ``n = lrn_conf.local_size`` (odd), ``h = n // 2`` and the
window of channel ``i`` the channels ``j`` with ``|i − j| <= h`` (clipped at the edges)::

    norm_i = knorm + (alpha / n) · Σ_{j in window(i)} x_j²
    y_i    = x_i · norm_i^(−beta)
    gx_i   = g_i · norm_i^(−beta) − (2·alpha·beta / n) · x_i · Σ_{j in window(i)} g_j·y_j / norm_j

(the window is symmetric, so "``i`` in window(j)" is "``j`` in window(i)"; ``g_j·y_j / norm_j``
is ``g_j·x_j·norm_j^(−beta−1)``). ``alpha`` is divided by the full ``n`` even where the window
is clipped, as in 0.3 (and Caffe, cuDNN, torch's ``local_response_norm``).

Implementation: the window sum is ``2h`` shifted slice-adds along the channel axis; for
``beta = 0.75`` (and 0.5, 1) ``norm^beta`` comes from square roots instead of ``np.power``.
All buffers are allocated at set-up in the source's memory layout (convolution/pooling hand
on NCHW views of batch-innermost buffers), so every ufunc runs over contiguous memory.

0.3 behaviour kept: 4-D sources only; ``local_size`` must be odd (default 5; 0.3's schema
declared it required, which this schema relaxes like every required field).
Deviation: set-up also rejects ``knorm <= 0`` and ``alpha < 0`` (0.3 accepted them and
produced inf/NaN where a window's norm reaches 0 or goes negative).
"""

from __future__ import annotations

import numpy as np

from singa_core.layer import NeuronLayer
from singa_core.memory import charge as charge_memory
from singa_core.param import DTYPE


def window_sum(src: np.ndarray, out: np.ndarray, half: int) -> None:
    """``out[:, i] = Σ_{|j−i| <= half} src[:, j]`` over axis 1, clipped at the edges."""
    if half == 0 or src.shape[1] == 1:
        np.copyto(out, src)
        return
    np.add(src[:, :-1], src[:, 1:], out=out[:, :-1])
    np.copyto(out[:, -1], src[:, -1])
    for d in range(2, half + 1):
        if d >= src.shape[1]:
            break
        np.add(out[:, :-d], src[:, d:], out=out[:, :-d])
    for d in range(1, half + 1):
        if d >= src.shape[1]:
            break
        np.add(out[:, d:], src[:, :-d], out=out[:, d:])


def pow_beta(base: np.ndarray, beta: float, out: np.ndarray, scratch: np.ndarray) -> None:
    """``out = base**beta`` (base > 0), with square roots for the common betas."""
    if beta == 0.75:
        np.sqrt(base, out=out)
        np.sqrt(out, out=scratch)
        np.multiply(out, scratch, out=out)
    elif beta == 0.5:
        np.sqrt(base, out=out)
    elif beta == 1.0:
        np.copyto(out, base)
    else:
        np.power(base, DTYPE(beta), out=out)


class LRNLayer(NeuronLayer):
    type_names = ("kLRN", "kCudnnLRN")
    placement = "device"

    def setup(self, srcs):
        self.expect_srcs(srcs)
        conf = self.conf.lrn_conf
        n = int(conf.local_size)
        if n <= 0 or n % 2 == 0:
            raise self.error(
                f"layer '{self.name}': lrn_conf.local_size must be a positive odd number, got {n}",
                field="lrn_conf.local_size",
                help="use an odd window such as `lrn_conf { local_size: 5 }` (the window is "
                "centred on each channel)",
            )
        alpha, beta, knorm = float(conf.alpha), float(conf.beta), float(conf.knorm)
        if knorm <= 0 or alpha < 0:
            raise self.error(
                f"layer '{self.name}': lrn_conf needs knorm > 0 and alpha >= 0 "
                f"(got knorm {knorm:g}, alpha {alpha:g}); otherwise the norm can reach 0",
                field="lrn_conf.knorm" if knorm <= 0 else "lrn_conf.alpha",
                help="the usual values are knorm: 1 (or 2) and a small positive alpha",
            )
        x = srcs[0].data
        if x is None or x.ndim != 4:
            shape = None if x is None else tuple(x.shape)
            raise self.error(
                f"layer '{self.name}' (kLRN) normalises across the channels of a 4-D "
                f"[batch, channels, height, width] source; '{srcs[0].name}' has shape {shape}",
                field="srclayers",
                help="put the LRN layer after a convolution or pooling layer",
            )
        self.local_size, self.half = n, n // 2
        self.alpha, self.beta, self.knorm = alpha, beta, knorm
        self._a = DTYPE(alpha / n)
        self._k = DTYPE(knorm)
        self._c = DTYPE(2.0 * alpha * beta / n)
        self.alloc_like(x)
        charge_memory(self, "scratch", (3, *self.data.shape), what="norm, its power, work buffer")
        self._norm = np.empty_like(self.data)  # knorm + (alpha/n)·window sum of x²
        self._powb = np.empty_like(self.data)  # norm**beta
        self._tmp = np.empty_like(self.data)  # scratch
        self._out: np.ndarray | None = None  # scratch for a source grad laid out differently

    def to_onnx(self, g, inputs):
        # ONNX LRN: x / (bias + alpha/size · Σ x²)^beta over the clipped channel window
        return g.add(
            "LRN",
            [inputs[0]],
            name=self.name,
            size=int(self.conf.lrn_conf.local_size),
            alpha=float(self.alpha),
            beta=float(self.beta),
            bias=float(self.knorm),
        )

    def forward(self, phase, srcs):
        x = srcs[0].data
        norm, powb, tmp = self._norm, self._powb, self._tmp
        np.multiply(x, x, out=tmp)
        window_sum(tmp, norm, self.half)
        np.multiply(norm, self._a, out=norm)
        np.add(norm, self._k, out=norm)
        pow_beta(norm, self.beta, powb, tmp)
        np.divide(x, powb, out=self.data)

    def backward(self, phase, srcs):
        buf = srcs[0].grad_for(self)
        if buf is None:
            return
        x, g, tmp = srcs[0].data, self.grad, self._tmp
        out = buf
        if buf.strides != self.data.strides:  # mixed layouts make every ufunc slow
            if self._out is None:
                self._out = np.empty_like(self.data)
            out = self._out
        np.multiply(g, self.data, out=tmp)
        np.divide(tmp, self._norm, out=tmp)  # g·y/norm = g·x·norm^(−beta−1)
        window_sum(tmp, out, self.half)
        np.multiply(out, x, out=out)
        np.multiply(out, self._c, out=out)
        np.divide(g, self._powb, out=tmp)
        np.subtract(tmp, out, out=out)
        if out is not buf:
            np.copyto(buf, out)
