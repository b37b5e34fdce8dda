"""Compiled pooling kernels (optional: numba, ``pip install 'singa-classic[fast]'``).

The pooling layers' numpy path makes one pass over the output per window offset and per
operation (four for a max with its argmax); these kernels make one pass over the output,
reading each window once, on the same batch-innermost ``(C, H, W, B)`` arrays and with
the same results: the running maximum with a strict ``>`` (the first maximum in row-major
order wins, its offset recorded as a uint8), the window sum times ``1/(kh·kw)``, and
backward adding each output's gradient to the input it came from. They loop serially
(deterministic, no thread pool competing with OpenBLAS's), with the batch innermost so
that the compiler vectorises the inner loop.

:func:`kernels` returns the compiled functions, or None when numba is not installed or
``SINGA_NUMBA=0`` is set; the layers then run their pure-numpy path. Both paths are tested
against the same loop reference and gradient checks.
"""

from __future__ import annotations

import os

from singa_core.memory import NUMBA_JIT_BYTES, NUMBA_JIT_NOTE

_KERNELS: object = None  # not yet tried; then a namespace of functions, or False

#: numba's compiler in a process, charged once to the memory estimate (measured: see
#: :data:`singa_core.memory.NUMBA_JIT_BYTES`)
JIT_BYTES = NUMBA_JIT_BYTES
JIT_NOTE = NUMBA_JIT_NOTE


def _compile():
    import numba

    jit = numba.njit(cache=True, nogil=True, fastmath=False)

    @jit
    def max_forward(xp, kh, kw, sh, sw, out, arg, record):
        nc, oh, ow, nb = out.shape
        for c in range(nc):
            for y in range(oh):
                for x in range(ow):
                    h0, w0 = y * sh, x * sw
                    for b in range(nb):
                        out[c, y, x, b] = xp[c, h0, w0, b]
                        if record:
                            arg[c, y, x, b] = 0
                    k = 0
                    for i in range(kh):
                        for j in range(kw):
                            if k > 0:
                                for b in range(nb):
                                    v = xp[c, h0 + i, w0 + j, b]
                                    if v > out[c, y, x, b]:
                                        out[c, y, x, b] = v
                                        if record:
                                            arg[c, y, x, b] = k
                            k += 1

    @jit
    def max_backward(g, arg, kh, kw, sh, sw, tiles, covers, gxp):
        nc, oh, ow, nb = g.shape
        if not covers:
            gxp[...] = 0.0
        for c in range(nc):
            for y in range(oh):
                for x in range(ow):
                    h0, w0 = y * sh, x * sw
                    if tiles:  # windows do not overlap: write every input once
                        k = 0
                        for i in range(kh):
                            for j in range(kw):
                                for b in range(nb):
                                    hit = arg[c, y, x, b] == k
                                    gxp[c, h0 + i, w0 + j, b] = g[c, y, x, b] if hit else 0.0
                                k += 1
                    else:
                        for b in range(nb):
                            k = arg[c, y, x, b]
                            gxp[c, h0 + k // kw, w0 + k % kw, b] += g[c, y, x, b]

    @jit
    def avg_forward(xp, kh, kw, sh, sw, scale, out):
        nc, oh, ow, nb = out.shape
        for c in range(nc):
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
        for c in range(nc):
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
    k.max_forward, k.max_backward = max_forward, max_backward
    k.avg_forward, k.avg_backward = avg_forward, avg_backward
    k.version = numba.__version__
    return k


def kernels():
    """The compiled kernels, or None (numba missing, or ``SINGA_NUMBA=0``)."""
    global _KERNELS
    if os.environ.get("SINGA_NUMBA", "1").strip() == "0":
        return None
    if _KERNELS is None:
        try:
            _KERNELS = _compile()
        except ImportError:
            _KERNELS = False
    return _KERNELS or None
