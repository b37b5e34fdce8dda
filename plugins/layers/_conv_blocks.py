"""A first convolution's two products, unfolded a block of output positions at a time.

The host's general convolution path (``_conv.py``) unfolds the whole batch into one
``(C·kh·kw + 1, oH·oW·B)`` matrix, then one GEMM reads it back. For CIFAR-10's conv1 that
matrix is 31 MB, about the last-level cache of the machine it was measured on: it is
written to memory and read back from it, in forward and again in the weight gradient.
Here each thread unfolds a few output positions into a block that stays in its L2 cache
and multiplies it at once, one ``cblas_sgemm`` per block called from the compiled loop
(:func:`singa_core.blas.sgemm_at`):

* forward, ``out[:, block] = [W | b] · [col_block; 1]``, each block's columns of the output;
* the weight gradient, ``Σ_blocks g[:, block] · [col_block; 1]ᵀ`` summed per thread, the
  threads' sums then added in order (the bits depend on the thread count alone).

CIFAR-10's conv1 at 2 threads (AMD EPYC, AVX2, 32 MB L3, 1 MB L2): forward 9.3 -> 6.0 ms,
weight gradient 7.3 -> 5.4 ms; at 1 thread forward 12.7 -> 10.5 ms. LeNet's first (a 3.8
MB matrix, cached either way) gains nothing, so a layer takes this path only where the
whole matrix would exceed half the last-level cache (:func:`pays`), and only for a source
that takes no gradient: the input gradient's col2im sums cross the blocks. Needs numba
and an SGEMM compiled code may call (numpy's OpenBLAS); :func:`kernels` is None otherwise.
"""

from __future__ import annotations

import numpy as np

from singa_core.blas import sgemm_address, sgemm_at
from singa_core.jit import Compiled, host_threads, parallel_ready, use_threads
from singa_core.resources import cache_bytes

#: the unfolded matrix must exceed this share of the last-level cache for blocks to pay
CACHE_SHARE = 0.5
#: a block's share of the L2 cache (the GEMM packs the block again beside it)
L2_SHARE = 0.25
_L2_UNKNOWN = 512 << 10
_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112


def _compile():
    import numba
    from numba import prange

    call = sgemm_at()
    if call is None or not parallel_ready():
        return None

    @numba.njit(cache=True, nogil=True)
    def fill_block(xp, buf, kh, kw, sh, sw, ow, q0, q1):
        # buf[(c, i, j), (q - q0)·B + b] = xp[c, y·sh + i, x·sw + j, b] for the output
        # positions q = y·ow + x in q0..q1 (row K, the ones, is never written)
        nc, _, _, nb = xp.shape
        for r in range(nc * kh * kw):
            c, i, j = r // (kh * kw), (r // kw) % kh, r % kw
            row = buf[r]
            for q in range(q0, q1):
                y, x = q // ow, q % ow
                src = xp[c, y * sh + i, x * sw + j]
                dst = row[(q - q0) * nb : (q - q0 + 1) * nb]
                for b in range(nb):
                    dst[b] = src[b]

    @numba.njit(parallel=True, nogil=True, cache=True)
    def forward(fn, xp, wb, out, kh, kw, sh, sw, oh, ow, per, parts, bufs):
        nb = xp.shape[3]
        nf, k1 = wb.shape
        npos = oh * ow
        nblk = (npos + per - 1) // per
        for p in prange(parts):
            buf = bufs[p]
            for blk in range(nblk * p // parts, nblk * (p + 1) // parts):
                q0 = blk * per
                q1 = min(q0 + per, npos)
                fill_block(xp, buf, kh, kw, sh, sw, ow, q0, q1)
                call(
                    fn, _ROW_MAJOR, _NO_TRANS, _NO_TRANS, nf, (q1 - q0) * nb, k1,
                    np.float32(1.0), wb.ctypes.data, k1, buf.ctypes.data, per * nb,
                    np.float32(0.0), out.ctypes.data + 4 * q0 * nb, out.shape[1],
                )  # fmt: skip

    @numba.njit(parallel=True, nogil=True, cache=True)
    def weight_grad(fn, xp, g, kh, kw, sh, sw, oh, ow, per, parts, bufs, sums):
        nb = xp.shape[3]
        nf, k1 = sums.shape[1], sums.shape[2]
        npos = oh * ow
        nblk = (npos + per - 1) // per
        for p in prange(parts):
            buf, mine = bufs[p], sums[p]
            lo, hi = nblk * p // parts, nblk * (p + 1) // parts
            if hi <= lo:
                mine[:] = 0.0
            for blk in range(lo, hi):
                q0 = blk * per
                q1 = min(q0 + per, npos)
                fill_block(xp, buf, kh, kw, sh, sw, ow, q0, q1)
                call(
                    fn, _ROW_MAJOR, _NO_TRANS, _TRANS, nf, k1, (q1 - q0) * nb,
                    np.float32(1.0), g.ctypes.data + 4 * q0 * nb, g.shape[1],
                    buf.ctypes.data, per * nb, np.float32(0.0 if blk == lo else 1.0),
                    mine.ctypes.data, k1,
                )  # fmt: skip

    class Kernels:
        pass

    kn = Kernels()
    kn.forward, kn.weight_grad = forward, weight_grad
    return kn


_KERNELS = Compiled(_compile)


def kernels():
    """The compiled block passes, or None (no numba, ``SINGA_NUMBA=0``, no shared pool)."""
    return _KERNELS.get()


def pays(rows: int, cols: int) -> bool:
    """Whether a ``(rows, cols)`` float32 unfolded matrix is big enough, on this machine,
    for the block passes: over :data:`CACHE_SHARE` of the last-level cache (a machine that
    does not say takes 8 MB)."""
    llc = cache_bytes(0) or (8 << 20)
    return rows * cols * 4 > CACHE_SHARE * llc


def positions_per_block(rows: int, batch: int) -> int:
    """Output positions a block holds: ``rows x positions·batch`` floats within
    :data:`L2_SHARE` of the L2 cache, at least one."""
    l2 = cache_bytes(2) or _L2_UNKNOWN
    return max(1, int(L2_SHARE * l2) // (rows * batch * 4))


class UnfoldedBlocks:
    """The block passes of one convolution: its per-thread blocks and sums.

    ``rows`` is C·kh·kw + 1 (the row of ones last), ``filters`` F; the arrays are made for
    ``threads`` threads (numba's pool), :meth:`forward` and :meth:`weight_grad` run on the
    host's thread count at the time, at most that."""

    def __init__(self, rows: int, filters: int, batch: int, threads: int) -> None:
        self.per = positions_per_block(rows, batch)
        self.threads = max(1, threads)
        blocks, sums = self.shapes(rows, filters, batch, threads)
        self.bufs = np.empty(blocks, dtype=np.float32)
        self.bufs[:, rows - 1] = 1.0
        self.sums = np.empty(sums, dtype=np.float32)
        self.fn = sgemm_address()  # the cblas_sgemm the compiled loops call, fixed per process

    @staticmethod
    def shapes(rows: int, filters: int, batch: int, threads: int) -> list[tuple]:
        """The shapes of the arrays :class:`UnfoldedBlocks` makes (for the memory charge)."""
        per = positions_per_block(rows, batch)
        return [(max(1, threads), rows, per * batch), (max(1, threads), filters, rows)]

    def _parts(self) -> int:
        return use_threads(min(self.threads, host_threads()))

    def forward(self, xp, wb, out, win, oh: int, ow: int) -> None:
        """``out (F, oH·oW·B) = wb (F, K+1) · [im2col(xp); 1]`` for the padded CHWN ``xp``."""
        kernels().forward(
            self.fn, xp, wb, out, win.kh, win.kw, win.sh, win.sw, oh, ow, self.per,
            self._parts(), self.bufs,
        )  # fmt: skip

    def weight_grad(self, xp, g, target, win, oh: int, ow: int) -> None:
        """``target (F, K+1) = g (F, oH·oW·B) · [im2col(xp); 1]ᵀ``."""
        parts = self._parts()
        kernels().weight_grad(
            self.fn, xp, g, win.kh, win.kw, win.sh, win.sw, oh, ow, self.per, parts,
            self.bufs, self.sums,
        )  # fmt: skip
        np.copyto(target, self.sums[0])
        for p in range(1, parts):
            np.add(target, self.sums[p], out=target)


def available() -> bool:
    """Whether the block passes can run here (compiled, and an SGEMM they may call)."""
    return sgemm_address() != 0 and kernels() is not None


def pool_threads() -> int:
    """The most threads the passes may run on (numba's pool): what the blocks are made for."""
    import numba

    return max(1, int(numba.config.NUMBA_NUM_THREADS))
