"""kSGD's momentum step as one pass on the host (kernel ``sgd_momentum_step``).

``h ← m·h − lr·(s·g + wd·w)``, ``w ← w + h`` element by element: each array is read once
and ``h`` and ``w`` written once, where numpy and BLAS make four passes (scale, decay,
history, value) and write the prepared gradient back. The gradient array is left as the
worker sent it. With numba (``singa-classic[fast]``; ``SINGA_NUMBA=0``: numpy's) the pass
is compiled, in float32 with the roundings of the four passes (a product and its sum
rounded once, as BLAS's fused multiply-add rounds them in ``axpy``: MKL's and OpenBLAS's
AVX-512 and AVX2 kernels; a library without them rounds twice, within an ulp), on as many
threads as the BLAS runs (:func:`singa_core.jit.host_threads`; each thread a contiguous
part of the arrays with the serial loop's operations, so the thread count changes no
value; RBM1's 784k weights beside MKL at 2 threads: 0.40 -> 0.22 ms a step, measured
alone). Without numba, numpy runs the four passes (:func:`numpy_step`, also every other
device's implementation: ``generic``).
"""

from __future__ import annotations

import numpy as np

from singa_core.blas import axpy
from singa_core.jit import Compiled, parallel_ready, serial_or_split

#: below this many values a pass runs on one thread (handing work to a second thread costs
#: more than it saves)
PARALLEL_MIN = 1 << 16


def numpy_step(value, grad, history, scale, weight_decay, lr, momentum) -> None:
    """The four passes, in SINGA's order (:meth:`Updater.prologue`, then the rule)."""
    if scale != 1.0:
        grad *= np.float32(scale)
    if weight_decay > 0:
        axpy(weight_decay, value, grad)
    history *= np.float32(momentum)
    axpy(-lr, grad, history)
    axpy(1.0, history, value)


def _compile():
    import numba

    f32, f64 = numba.float32, numba.float64

    @numba.njit(cache=True, nogil=True, fastmath=False)
    def step(w, g, h, s, wd, lr, m):
        # a·x + y as BLAS's axpy rounds it (a fused multiply-add: once), through
        # float64, where the float32 product is exact
        wd64, rate64 = f64(wd), -f64(lr)
        for i in range(w.size):
            gi = g[i] * s if s != 1 else g[i]
            if wd > 0:
                gi = f32(wd64 * f64(w[i]) + f64(gi))
            hi = f32(rate64 * f64(gi) + f64(h[i] * m))
            h[i] = hi
            w[i] = w[i] + hi

    if not parallel_ready():
        return step, None

    @numba.njit(cache=True, nogil=True, fastmath=False, parallel=True)
    def split_step(w, g, h, s, wd, lr, m, parts):
        # the serial loop over ``parts`` contiguous parts, one a thread
        n = w.size
        size = (n + parts - 1) // parts
        for p in numba.prange(parts):
            lo, hi = p * size, min(n, (p + 1) * size)
            step(w[lo:hi], g[lo:hi], h[lo:hi], s, wd, lr, m)

    return step, split_step


_STEP = Compiled(_compile)


def compiles() -> bool:
    """Whether the host step will be compiled, without loading numba now."""
    return _STEP.available()


def host_step(value, grad, history, scale, weight_decay, lr, momentum) -> None:
    """One compiled pass over C-contiguous float32 arrays; numpy's passes otherwise."""
    made = _STEP.get()
    if made is None or not (
        value.flags.c_contiguous and grad.flags.c_contiguous and history.flags.c_contiguous
    ):
        numpy_step(value, grad, history, scale, weight_decay, lr, momentum)
        return
    f32 = np.float32
    args = (value.reshape(-1), grad.reshape(-1), history.reshape(-1), f32(scale),
            f32(weight_decay), f32(lr), f32(momentum))  # fmt: skip
    serial_or_split(*made, value.size, PARALLEL_MIN, *args)
