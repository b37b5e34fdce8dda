"""Products with one-hot rows: a gather instead of a GEMM, a scatter-add instead of its
transpose (the host's kernels ``one_hot_rows``, ``gather_columns``, ``add_rows_at``).

A consumer of one-hot rows (char-rnn's kGRU reads kOneHot's ``(T·B, V)`` rows) multiplies
them by a weight: ``X·Wᵀ`` forward and ``Xᵀ·D`` for the weight's gradient. When every row
of ``X`` is exactly one 1 among zeros, row ``i`` of ``X·Wᵀ`` is column ``idx_i`` of ``W``
(the GEMM's sum has one term ``1·w``, the others ``0·w = 0``: the same float32 value), and
row ``k`` of ``Xᵀ·D`` is the sum of the rows ``i`` of ``D`` with ``idx_i = k``. For
char-rnn (V = 65, 3H = 1536, T·B = 2500) the two GEMMs are 1 GFLOP a step; the gather and
the scatter-add move its 15 MB once each.

``one_hot_rows`` is a choice between algorithms (a composite kernel): on the host it checks
the rows in one pass and gives their indices, else None; a GPU keeps its GEMMs (None). The
other two run only where it gave indices. The scatter-add adds the rows in row order
(deterministic; numpy's ``np.add.at`` where numba is missing, the same order and sums).
"""

from __future__ import annotations

import threading

import numpy as np

from singa_core.jit import Compiled, parallel_ready, serial_or_split
from singa_core.kernels import define_kernel


def _compile():
    import numba

    jit = numba.njit(cache=True, nogil=True, fastmath=False)

    @jit
    def find(x, idx):
        rows, cols = x.shape
        for i in range(rows):
            xr = x[i]
            hot, ones, other = 0, 0, 0
            for k in range(cols):
                v = xr[k]
                if v == 1.0:
                    ones += 1
                    hot = k
                elif v != 0.0:
                    other += 1
            if ones != 1 or other != 0:
                return False
            idx[i] = hot
        return True

    @jit
    def gather_rows(wt, idx, out):
        # out[i] = wt[idx[i]]: rows of wᵀ, contiguous copies
        for i in range(out.shape[0]):
            src, o = wt[idx[i]], out[i]
            for j in range(o.shape[0]):
                o[j] = src[j]

    split_gather = None
    if parallel_ready():

        @numba.njit(cache=True, nogil=True, parallel=True)
        def split_gather(wt, idx, out, parts):
            rows = out.shape[0]
            for p in numba.prange(parts):
                lo, hi = rows * p // parts, rows * (p + 1) // parts
                gather_rows(wt, idx[lo:hi], out[lo:hi])

    @jit
    def add_rows_at(src, idx, out):
        out[...] = 0.0
        rows, cols = src.shape
        for i in range(rows):
            s, o = src[i], out[idx[i]]
            for j in range(cols):
                o[j] += s[j]

    return find, (gather_rows, split_gather), add_rows_at


_PASSES = Compiled(_compile)


def _dense(*arrays) -> bool:
    return all(type(a) is np.ndarray and a.flags.c_contiguous for a in arrays)


def one_hot_rows_host(x, idx):
    """``idx`` filled with each row's hot column and returned when every row of the 2-D
    float32 ``x`` is one 1 among zeros; else None."""
    if x.ndim != 2 or idx.shape != (x.shape[0],) or not _dense(x, idx):
        return None
    passes = _PASSES.get()
    if passes is not None:
        return idx if passes[0](x, idx) else None
    ones = x == 1.0
    if not (np.count_nonzero(ones, axis=1) == 1).all() or np.count_nonzero(x) != x.shape[0]:
        return None
    np.argmax(ones, axis=1, out=idx)
    return idx


#: rows gathered on the host's threads from this many values (char-rnn: 2,500 x 1,536)
SPLIT_MIN = 1 << 16
_transposed = threading.local()  # wᵀ, copied once a call into a buffer kept per shape


def gather_columns_host(w, idx, out) -> None:
    """``out[i, :] = w[:, idx[i]]`` (``X·wᵀ`` for the one-hot rows of ``idx``): ``w``
    transposed once into a buffer, then its rows copied (on the host's threads where the
    BLAS has several: copies, the same values on any count). Reading ``w``'s columns
    directly strode by ``w``'s row length for every value (char-rnn: 3.6 ms a step, AMD
    EPYC, 2 threads)."""
    passes = _PASSES.get()
    if passes is None or not _dense(w, idx, out):
        np.take(w.T, idx, axis=0, out=out)
        return
    wt = getattr(_transposed, "buf", None)
    if wt is None or wt.shape != w.shape[::-1]:
        wt = _transposed.buf = np.empty(w.shape[::-1], dtype=w.dtype)
    np.copyto(wt, w.T)
    serial_or_split(*passes[1], out.size, SPLIT_MIN, wt, idx, out)


def add_rows_at_host(src, idx, out) -> None:
    """``out = 0``, then ``out[idx[i], :] += src[i, :]`` for each row ``i`` in order
    (``Xᵀ·src`` for the one-hot rows of ``idx``)."""
    passes = _PASSES.get()
    if passes is not None and _dense(src, idx, out):
        passes[2](src, idx, out)
    else:
        out[...] = 0.0
        np.add.at(out, idx, src)


define_kernel(
    "one_hot_rows",
    host=one_hot_rows_host,
    cuda=lambda x, idx: None,
    composite=True,
    doc="the hot column of each row when every row is one-hot (host), else None: a "
    "product with them is then a gather",
)
define_kernel(
    "gather_columns",
    host=gather_columns_host,
    generic=lambda w, idx, out: out.__setitem__(Ellipsis, w.T[idx]),
    doc="out[i] = w[:, idx[i]]: one-hot rows times wᵀ",
)
define_kernel(
    "add_rows_at",
    host=add_rows_at_host,
    doc="out = 0; out[idx[i]] += src[i] in row order: one-hot rows, transposed, times src",
)
