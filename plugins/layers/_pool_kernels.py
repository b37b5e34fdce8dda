"""Compiled pooling kernels (optional: numba, ``pip install 'singa-classic[fast]'``).

The pooling layers' numpy path makes one pass over the output per window offset and per
operation (four for a max with its argmax); these kernels make one pass over the output,
reading each window once, on the same batch-innermost ``(C, H, W, B)`` arrays and with
the same results: the running maximum with a strict ``>`` (the first maximum in row-major
order wins, its offset recorded as a uint8), the window sum times ``1/(kh·kw)``, and
backward adding each output's gradient to the input it came from. Their channels are
spread over numba's thread pool, as many threads as the BLAS runs
(:func:`singa_core.jit.threaded`; one where the user asked for one), each output computed
by one thread with the same operations as a serial loop (deterministic); the batch is
innermost so that the compiler vectorises the inner loop. The pool must be one that
callers in several threads may share (:func:`singa_core.jit.parallel_ready`); where there
is none, :func:`kernels` is None.

:func:`kernels` returns the compiled functions, or None when numba is not installed or
``SINGA_NUMBA=0`` is set; the layers then run their pure-numpy path. Both paths are tested
against the same loop reference and gradient checks.
"""

from __future__ import annotations

from singa_core.jit import Compiled, parallel_ready, threaded
from singa_core.memory import NUMBA_JIT_BYTES

#: numba's compiler in a process, which the layers with compiled kernels charge once to the
#: memory estimate (:func:`singa_core.memory.charge_numba`; measured: see
#: :data:`singa_core.memory.NUMBA_JIT_BYTES`)
JIT_BYTES = NUMBA_JIT_BYTES


def _compile():
    import numba
    import numpy as np

    if not parallel_ready():  # no thread pool that several callers may share: numpy's
        return False

    jit = numba.njit(cache=True, nogil=True, fastmath=False, parallel=True)
    prange = numba.prange

    @jit
    def max_forward(xp, kh, kw, sh, sw, out, arg, record):
        # branchless, with the offsets kept in int32 until each window is done: the batch
        # loop then vectorises with blends on AVX2 too (a conditional store, or a select
        # narrowing a float compare to the uint8 offset, left it scalar on branches the
        # data mispredict: 21-24 ms against 2.3 for CIFAR-10's pool1 on an AMD EPYC)
        nc, oh, ow, nb = out.shape
        for c in prange(nc):
            best = np.empty(nb, np.int32)
            for y in range(oh):
                for x in range(ow):
                    h0, w0 = y * sh, x * sw
                    for b in range(nb):
                        out[c, y, x, b] = xp[c, h0, w0, b]
                        best[b] = 0
                    k = 0
                    for i in range(kh):
                        for j in range(kw):
                            if k > 0:
                                for b in range(nb):
                                    v = xp[c, h0 + i, w0 + j, b]
                                    m = out[c, y, x, b]
                                    hit = v > m
                                    out[c, y, x, b] = v if hit else m
                                    best[b] = k if hit else best[b]
                            k += 1
                    if record:
                        for b in range(nb):
                            arg[c, y, x, b] = best[b]

    @jit
    def max_backward(g, arg, kh, kw, sh, sw, tiles, covers, gxp):
        nc, oh, ow, nb = g.shape
        zero = g.dtype.type(0.0)
        if tiles:  # windows do not overlap: write every input once
            if not covers:
                gxp[...] = 0.0
            for c in prange(nc):
                for y in range(oh):
                    for x in range(ow):
                        h0, w0 = y * sh, x * sw
                        k = 0
                        for i in range(kh):
                            for j in range(kw):
                                for b in range(nb):
                                    hit = arg[c, y, x, b] == k
                                    gxp[c, h0 + i, w0 + j, b] = g[c, y, x, b] if hit else zero
                                k += 1
            return
        # overlapping windows: each input gathers, in output order, the gradients of the
        # windows that cover it and chose it (the sums of a scatter in output order, each
        # input written once and kept in cache; branchless, so the batch loop vectorises)
        _, hp, wp, _ = gxp.shape
        for c in prange(nc):
            for h in range(hp):
                y0, y1 = max(0, (h - kh + sh) // sh), min(oh - 1, h // sh)
                for w in range(wp):
                    x0, x1 = max(0, (w - kw + sw) // sw), min(ow - 1, w // sw)
                    for b in range(nb):
                        gxp[c, h, w, b] = zero
                    for y in range(y0, y1 + 1):
                        for x in range(x0, x1 + 1):
                            k = (h - y * sh) * kw + (w - x * sw)
                            for b in range(nb):
                                hit = arg[c, y, x, b] == k
                                gxp[c, h, w, b] += g[c, y, x, b] if hit else zero

    @jit
    def avg_forward(xp, kh, kw, sh, sw, scale, out):
        nc, oh, ow, nb = out.shape
        for c in prange(nc):
            for y in range(oh):
                for x in range(ow):
                    h0, w0 = y * sh, x * sw
                    for b in range(nb):
                        out[c, y, x, b] = 0.0
                    for i in range(kh):
                        for j in range(kw):
                            for b in range(nb):
                                out[c, y, x, b] += xp[c, h0 + i, w0 + j, b]
                    for b in range(nb):
                        out[c, y, x, b] *= scale

    @jit
    def avg_backward(g, kh, kw, sh, sw, scale, gxp):
        nc, oh, ow, nb = g.shape
        gxp[...] = 0.0
        for c in prange(nc):
            for y in range(oh):
                for x in range(ow):
                    h0, w0 = y * sh, x * sw
                    for i in range(kh):
                        for j in range(kw):
                            for b in range(nb):
                                gxp[c, h0 + i, w0 + j, b] += g[c, y, x, b] * scale

    class Kernels:
        pass

    k = Kernels()
    k.max_forward, k.max_backward = threaded(max_forward), threaded(max_backward)
    k.avg_forward, k.avg_backward = threaded(avg_forward), threaded(avg_backward)
    k.version = numba.__version__
    return k


def kernels():
    """The compiled kernels, or None (numba missing, or ``SINGA_NUMBA=0``)."""
    return _KERNELS.get()


_KERNELS = Compiled(_compile)
