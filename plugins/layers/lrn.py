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
from singa_builtins.layers._host_kernels import kernels as compiled
from singa_builtins.layers._host_kernels import memory_order

from singa_core.cuda import BLOCK, CUPY, dense_alike, grid_for
from singa_core.jit import use_host_threads
from singa_core.kernels import define_kernel
from singa_core.layer import NeuronLayer
from singa_core.memory import charge as charge_memory
from singa_core.memory import charge_numba
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


# -- the kernels: one launch each way on a GPU ------------------------------------------------
def lrn_forward_host(x, y, norm, powb, tmp, half, a, k, beta) -> None:
    """``norm = k + a·window_sum(x²)``, ``powb = norm**beta``, ``y = x / powb`` (``tmp``:
    scratch; every array [B, C, H, W] in one layout)."""
    np.multiply(x, x, out=tmp)
    window_sum(tmp, norm, half)
    np.multiply(norm, DTYPE(a), out=norm)
    np.add(norm, DTYPE(k), out=norm)
    pow_beta(norm, beta, powb, tmp)
    np.divide(x, powb, out=y)


def lrn_backward_host(x, y, g, norm, powb, out, tmp, half, c) -> None:
    """``out = g / powb − c·x·window_sum(g·y / norm)`` (``tmp``: scratch)."""
    np.multiply(g, y, out=tmp)
    np.divide(tmp, norm, out=tmp)  # g·y/norm = g·x·norm^(−beta−1)
    window_sum(tmp, out, half)
    np.multiply(out, x, out=out)
    np.multiply(out, DTYPE(c), out=out)
    np.divide(g, powb, out=tmp)
    np.subtract(tmp, out, out=out)


def lrn_forward_cpu(x, y, norm, powb, tmp, half, a, k, beta) -> None:
    """:func:`lrn_forward_host` in one compiled pass where it can run (``_host_kernels``:
    the same operations in the same order; beta 0.75, 0.5 or 1)."""
    fast, mode = compiled(), _BETA_MODES.get(float(beta), 0)
    # another beta takes numpy's np.power, whose last bit the compiled pow may not share
    views = memory_order([x, y, norm, powb], axis=1) if fast and mode else None
    if views is None:
        lrn_forward_host(x, y, norm, powb, tmp, half, a, k, beta)
        return
    fast.lrn_forward(*views, half, DTYPE(a), DTYPE(k), mode, use_host_threads())


def lrn_backward_cpu(x, y, g, norm, powb, out, tmp, half, c) -> None:
    """:func:`lrn_backward_host` in one compiled pass where it can run."""
    fast = compiled()
    arrays = [x, y, g, norm, powb, out, tmp]
    views = memory_order(arrays, axis=1) if fast is not None else None
    if views is None:
        lrn_backward_host(x, y, g, norm, powb, out, tmp, half, c)
        return
    fast.lrn_backward(*views, half, DTYPE(c), use_host_threads())


def _window_sum_source(term: str) -> str:
    """CUDA C of window_sum's additions for the channel ``ch`` of element ``i``, in its
    order (the next channel, the later ones, then the earlier ones); ``term(o)`` is the
    summed quantity at element offset ``o``."""
    return f"""
    float s = {term("0")};
    if (ch + 1 < C) s = s + {term("cs")};
    for (int d = 2; d <= half && d < C; ++d) if (ch + d < C) s = s + {term("d * cs")};
    for (int d = 1; d <= half && d < C; ++d) if (ch - d >= 0) s = s + {term("-d * cs")};
"""


_LRN_INDEX = """
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += stride) {
    // e runs over memory; the element's channel from the channel stride cs
    const int ch = (int)((e / cs) % C);
"""

_LRN_FORWARD = (
    'extern "C" __global__ void singa_lrn_forward(const float* __restrict__ x, '
    "float* __restrict__ y, float* __restrict__ norm, float* __restrict__ powb, long long n, "
    "long long cs, int C, int half, float a, float k, float beta, int mode) {"
    + _LRN_INDEX
    + _window_sum_source(lambda o: f"(x[e + ({o})] * x[e + ({o})])")
    + """
    const float nm = __fmul_rn(s, a) + k;
    float p;
    if (mode == 1) { const float r = sqrtf(nm); p = r * sqrtf(r); }
    else if (mode == 2) p = sqrtf(nm);
    else if (mode == 3) p = nm;
    else p = powf(nm, beta);
    norm[e] = nm;
    powb[e] = p;
    y[e] = x[e] / p;
  }
}
"""
)

_LRN_BACKWARD = (
    'extern "C" __global__ void singa_lrn_backward(const float* __restrict__ x, '
    "const float* __restrict__ y, const float* __restrict__ g, const float* __restrict__ norm, "
    "const float* __restrict__ powb, float* __restrict__ out, long long n, long long cs, "
    "int C, int half, float c) {"
    + _LRN_INDEX
    + _window_sum_source(lambda o: f"((g[e + ({o})] * y[e + ({o})]) / norm[e + ({o})])")
    + """
    out[e] = g[e] / powb[e] - __fmul_rn(__fmul_rn(s, x[e]), c);
  }
}
"""
)

_BETA_MODES = {0.75: 1, 0.5: 2, 1.0: 3}


def _channel_stride(a) -> int | None:
    """The channel stride in elements when the [B, C, H, W] array ``a`` is dense (so the
    kernel can walk its memory), else None."""
    return int(a.strides[1] // a.itemsize) if dense_alike([a]) else None


def lrn_forward_cuda(x, y, norm, powb, tmp, half, a, k, beta, rt=CUPY) -> None:
    cs = _channel_stride(x)
    rt.kernel(_LRN_FORWARD, "singa_lrn_forward")(
        grid_for(x.size), BLOCK,
        (x, y, norm, powb, np.int64(x.size), np.int64(cs), np.int32(x.shape[1]),
         np.int32(half), np.float32(a), np.float32(k), np.float32(beta),
         np.int32(_BETA_MODES.get(float(beta), 0))),
    )  # fmt: skip


def lrn_backward_cuda(x, y, g, norm, powb, out, tmp, half, c, rt=CUPY) -> None:
    cs = _channel_stride(x)
    rt.kernel(_LRN_BACKWARD, "singa_lrn_backward")(
        grid_for(x.size), BLOCK,
        (x, y, g, norm, powb, out, np.int64(x.size), np.int64(cs), np.int32(x.shape[1]),
         np.int32(half), np.float32(c)),
    )  # fmt: skip


define_kernel(
    "lrn_forward",
    host=lrn_forward_cpu,
    generic=lrn_forward_host,
    cuda=lrn_forward_cuda,
    fits=lambda x, y, norm, powb, *rest: dense_alike([x, y, norm, powb]),
    doc="local response normalisation across channels (one launch on a GPU)",
)
define_kernel(
    "lrn_backward",
    host=lrn_backward_cpu,
    generic=lrn_backward_host,
    cuda=lrn_backward_cuda,
    fits=lambda x, y, g, norm, powb, out, *rest: dense_alike([x, y, g, norm, powb, out]),
    doc="LRN's source gradient (one launch on a GPU)",
)


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
        if self.kernels.host_jit():  # its first call loads numba's compiler
            charge_numba(self)

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
        self.kernels.lrn_forward(
            srcs[0].data, self.data, self._norm, self._powb, self._tmp, self.half,
            float(self._a), float(self._k), self.beta,
        )  # fmt: skip

    def backward(self, phase, srcs):
        buf = srcs[0].grad_for(self)
        if buf is None:
            return
        out = buf
        if buf.strides != self.data.strides:  # mixed layouts make every ufunc slow
            if self._out is None:
                self._out = np.empty_like(self.data)
            out = self._out
        self.kernels.lrn_backward(
            srcs[0].data, self.data, self.grad, self._norm, self._powb, out, self._tmp,
            self.half, float(self._c),
        )  # fmt: skip
        if out is not buf:
            np.copyto(buf, out)
