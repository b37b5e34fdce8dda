"""Pin the number of BLAS threads of this process (SINGA's ``num_openblas_threads``).

Uses threadpoolctl (OpenBLAS, MKL, BLIS and the OpenMP runtimes) and, directly, the
OpenBLAS that numpy loaded (``openblas_set_num_threads``, under the symbol names of the
scipy-openblas builds numpy's wheels ship). Engines call :func:`set_blas_threads` in every
worker process; :func:`blas_threads_problem` is the note when the count cannot be applied.
The default count is the CPUs this process may use
(:func:`singa_core.contracts.resources.usable_cpus`: affinity mask and cgroup quota).
"""

from __future__ import annotations

import ctypes
import os
import threading

from singa_core.contracts import packed_gemm, sgemm_split
from singa_core.contracts.openblas import SETTERS as _SETTERS
from singa_core.contracts.openblas import find_saxpy, openblas_threads
from singa_core.contracts.openblas import openblas_libraries as _openblas_libs
from singa_core.contracts.sgemm_split import sgemm_address, sgemm_at  # noqa: F401 - plugin API

#: environment variables that set the BLAS thread count, in the order they are honoured:
#: OpenBLAS's, MKL's (singa's SGEMM on Intel CPUs with the ``mkl`` extra), then OpenMP's
THREAD_ENV_VARS = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS")


def blas_threads_for(job, default: int, environ=None) -> int:
    """The BLAS threads of one SINGA process: job.conf's ``num_openblas_threads`` when it
    is set; else the user's ``OPENBLAS_NUM_THREADS``, else ``OMP_NUM_THREADS`` (as numpy
    and PyTorch honour them; a value that is not a positive integer, such as OpenMP's
    ``"4,2"`` lists, counts as unset); else ``default`` (the engine's choice: all cores for
    the in-process engine, a share of them per process for the others)."""
    if job is not None and job.HasField("num_openblas_threads"):
        return max(1, int(job.num_openblas_threads))
    env = os.environ if environ is None else environ
    for name in THREAD_ENV_VARS:
        value = env.get(name, "").strip()
        if value.isdigit() and int(value) > 0:
            return int(value)
    return max(1, int(default))


def blas_threads_set_by(job, environ=None) -> str | None:
    """What sets the BLAS thread count: ``"num_openblas_threads"`` (job.conf), the name of
    the environment variable, or None (singa chooses: :func:`choose_blas_threads`)."""
    if job is not None and job.HasField("num_openblas_threads"):
        return "num_openblas_threads"
    env = os.environ if environ is None else environ
    for name in THREAD_ENV_VARS:
        value = env.get(name, "").strip()
        if value.isdigit() and int(value) > 0:
            return name
    return None


#: N threads are chosen over 1 only when their products take at most this share of the time
#: with 1 (hysteresis: 1 thread is never replaced for a gain within the noise)
AUTO_THREADS_GAIN = 0.9


def faster_thread_count(times: dict[int, list[float]]) -> tuple[int, str]:
    """The thread count to keep from timed steps (``{1: [s, ...], N: [s, ...]}``), and why.

    N is kept only when every one of its steps is below ``AUTO_THREADS_GAIN`` of 1 thread's
    median: on a machine shared with CPU-bound work N threads often run much slower than 1
    (a competitor that pauses for a moment can make a single N-thread step look fast), and
    1 thread is never given up for a gain within the noise."""
    med = {n: sorted(v)[len(v) // 2] for n, v in times.items() if v}
    many = max(med)
    if many == 1 or 1 not in med:
        return many, "nothing to compare"
    choice = many if max(times[many]) < AUTO_THREADS_GAIN * med[1] else 1
    why = (
        f"median step {med[1] * 1000:.1f} ms at 1 thread, {med[many] * 1000:.1f} ms at "
        f"{many} (slowest {max(times[many]) * 1000:.1f} ms) over {len(times[1])}+"
        f"{len(times[many])} trial steps; {many} are kept only when every step is at least "
        f"{round((1 - AUTO_THREADS_GAIN) * 100)}% faster"
    )
    return choice, why


def set_blas_threads(n: int) -> bool:
    """Set the thread count of numpy's BLAS (OpenBLAS, MKL, BLIS) and of the OpenMP
    runtimes loaded, through threadpoolctl, and OpenBLAS's directly; True if numpy's BLAS
    now runs ``n`` threads (see :func:`blas_threads_problem` for the note when not)."""
    import numpy  # noqa: F401 - its BLAS must be loaded for threadpoolctl to see it

    n = max(1, int(n))
    from singa_core.contracts import sgemm

    sgemm.threads_changed(n)
    # OpenBLAS's GEMMs cut over singa's own pool (sgemm_split): OpenBLAS itself runs one
    blas_n = 1 if sgemm_split.use(sgemm._chosen or sgemm.chosen(), n) else n
    done = False
    for lib in _openblas_libs():
        for sym in _SETTERS:
            fn = getattr(lib, sym, None)
            if fn is not None:
                fn(ctypes.c_int(blas_n))
                done = True
                break
        if done:
            break
    try:
        from threadpoolctl import ThreadpoolController

        ctl = ThreadpoolController()
        ctl.limit(limits={"blas": blas_n, "openmp": n})
        blas = [lib for lib in ctl.info() if lib.get("user_api") == "blas"]
        if blas:
            return all(int(lib.get("num_threads", 0)) == blas_n for lib in blas)
    except Exception:  # noqa: BLE001 - threadpoolctl missing or failing: OpenBLAS alone
        pass
    return done


def blas_libraries() -> list[str]:
    """``"openblas 0.3.27 (4 threads)"`` for each BLAS numpy loaded (through threadpoolctl)."""
    import numpy  # noqa: F401

    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return []
    return [
        f"{lib.get('internal_api')} {lib.get('version') or ''} ({lib.get('num_threads')} "
        "threads)".replace("  ", " ")
        for lib in threadpool_info()
        if lib.get("user_api") == "blas"
    ]


def blas_threads_problem(n: int) -> str | None:
    """A note when :func:`set_blas_threads` could not set ``n`` threads, else None."""
    if set_blas_threads(n):
        return None
    libs = blas_libraries()
    what = ", ".join(libs) if libs else "no BLAS library threadpoolctl recognises"
    return (
        f"note: cannot set numpy's BLAS to {n} thread(s): {what}; set the thread count in the "
        "environment before starting singa instead (OPENBLAS_NUM_THREADS, MKL_NUM_THREADS, "
        "OMP_NUM_THREADS)"
    )


def get_blas_threads() -> int | None:
    """The threads singa's GEMMs run on: those they are cut over where OpenBLAS's GEMMs
    share singa's pool (:mod:`~singa_core.contracts.sgemm_split`), else numpy's BLAS's
    count (MKL's follows it: :func:`set_blas_threads`)."""
    if sgemm_split.active():
        return sgemm_split.parts()
    return openblas_threads()


def host_sgemm() -> str:
    """The host's SGEMM library and why it was chosen (``"mkl 2026.2 (an Intel CPU, …)"``;
    :mod:`singa_core.contracts.sgemm`)."""
    from singa_core.contracts import sgemm

    what = sgemm.describe().removeprefix("sgemm: ")
    if sgemm_split.active():  # "(why)" -> "(why; its GEMMs cut over singa's N threads)"
        what = f"{what[:-1]}; its GEMMs cut over singa's {sgemm_split.parts()} threads)"
    return what


_saxpy = None  # resolved lazily: a ctypes function, or False when unavailable


def axpy(a: float, x, y) -> None:
    """``y += a * x`` in place in one fused pass, with the host's BLAS (cblas_saxpy of the
    library :mod:`singa_core.contracts.sgemm` chose, so one thread pool works, not two).

    Updaters touch every parameter every step; one fused pass is several times faster than
    numpy's ``x * a`` then ``y += ...`` and allocates nothing. (scipy's BLAS is avoided on
    purpose: it is a second OpenBLAS whose spinning threads slow down numpy's GEMMs.)
    """
    import numpy as np

    global _saxpy
    if not (isinstance(x, np.ndarray) and isinstance(y, np.ndarray)):
        y += np.float32(a) * x  # device arrays: their own module (one fused kernel on CuPy)
        return
    from singa_core.contracts import sgemm

    lib = sgemm._chosen or sgemm.chosen()  # the GEMMs' library: one thread pool busy
    saxpy = lib.saxpy if lib is not None and lib.saxpy else None
    if saxpy is None:
        if _saxpy is None:
            _saxpy = find_saxpy()  # numpy's OpenBLAS's
        saxpy = _saxpy
    if (
        saxpy
        and x.dtype == np.float32
        and y.dtype == np.float32
        and x.flags.c_contiguous
        and y.flags.c_contiguous
        and x.size == y.size
    ):
        saxpy(x.size, a, x.ctypes.data, 1, y.ctypes.data, 1)
    else:
        y += np.float32(a) * x


_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112


def _blas_operand(x):
    """(transposed?, leading dimension) of a 2-D float32 array for row-major BLAS, or None
    when its memory layout is neither row- nor column-major with a leading dimension.

    Views into a larger array qualify as long as one axis has unit stride (a block of rows
    of ``x[:, a:b]`` in a wider matrix, say)."""
    item = x.itemsize
    rows, cols = x.shape
    s0, s1 = x.strides
    if (s1 == item or cols <= 1) and s0 % item == 0 and s0 // item >= max(cols, 1):
        return False, s0 // item
    if (s0 == item or rows <= 1) and s1 % item == 0 and s1 // item >= max(rows, 1):
        return True, s1 // item
    if x.flags.c_contiguous:
        return False, max(cols, 1)
    if x.flags.f_contiguous:
        return True, max(rows, 1)
    return None


def _call_sgemm(a, b, c, alpha: float, beta: float) -> bool:
    """``c = alpha·a@b + beta·c`` through cblas_sgemm when the layouts allow; False if not.

    The cblas_sgemm is numpy's OpenBLAS's or MKL's, whichever
    :mod:`singa_core.contracts.sgemm` chose for this machine."""
    import numpy as np

    from singa_core.contracts import sgemm as library

    lib = library._chosen or library.chosen()
    fn = lib.sgemm if lib is not None else None
    if not (
        fn is not None
        and a.ndim == 2
        and b.ndim == 2
        and c.ndim == 2
        and a.dtype == b.dtype == c.dtype == np.float32
        and c.shape == (a.shape[0], b.shape[1])
        and a.shape[1] == b.shape[0]
    ):
        return False
    la, lb, lc = _blas_operand(a), _blas_operand(b), _blas_operand(c)
    if la is None or lb is None or lc is None or lc[0]:
        return False
    m, k = a.shape
    n = b.shape[1]
    if m == 0 or n == 0:
        return True
    sgemm_split.call(
        fn,
        _TRANS if la[0] else _NO_TRANS,
        _TRANS if lb[0] else _NO_TRANS,
        m,
        n,
        k,
        alpha,
        a.ctypes.data,
        max(la[1], 1),
        b.ctypes.data,
        max(lb[1], 1),
        beta,
        c.ctypes.data,
        max(lc[1], 1),
        c,
    )
    return True


def _host(*arrays) -> bool:
    """Whether every operand is a numpy array (the ctypes BLAS calls need host memory;
    device arrays take their own module's path)."""
    import numpy as np

    return all(isinstance(x, np.ndarray) for x in arrays)


#: ``c = a·b`` with at most this many rows (and at least 128 and twice as many columns),
#: ``a`` C-contiguous and ``b`` the transpose of a C-contiguous matrix (``x·Wᵀ``), is
#: computed transposed, ``cᵀ = W·aᵀ``, and copied: OpenBLAS is 10-45% faster with the few
#: rows on that side, more than the copy costs (measured: a GRU step's 50 x 512 x 1536 at
#: 0.77-0.78 of the time at 1 and 2 threads, MLP-sized 64 x 784 x 2500 at 0.86-0.91). With
#: ``b`` C-contiguous (a convolution's columns) the transposed call is slower: not used.
FEW_ROWS = 64
_scratch = threading.local()


def _gemm_host(a, b, c, beta: float, alpha: float = 1.0) -> None:
    """``c = alpha·a @ b + beta·c`` on the host: cblas_sgemm on strided views where the layouts
    allow (a product of few rows transposed, see :data:`FEW_ROWS`), numpy (with a
    temporary) otherwise."""
    import numpy as np

    m, n = c.shape if c.ndim == 2 else (0, 0)
    if (
        alpha == 1.0
        and _few_rows_transposed()
        and 0 < m <= FEW_ROWS
        and n >= max(128, 2 * m)
        and beta in (0.0, 1.0)
        and b.ndim == 2
        and b.flags.f_contiguous
        and not b.flags.c_contiguous
        and a.flags.c_contiguous
    ):
        t = _transposed_scratch(n, m)
        if _call_sgemm(b.T, a.T, t, 1.0, 0.0):
            if beta == 0.0:
                np.copyto(c, t.T)
            else:
                c += t.T
            return
    if not _call_sgemm(a, b, c, alpha, beta):
        _gemm_generic(a, b, c, beta, alpha)


def _few_rows_transposed() -> bool:
    """Whether the :data:`FEW_ROWS` transposition pays: with OpenBLAS only (MKL multiplies
    the few rows as fast where they are), and not where its GEMMs are cut over singa's
    pool (:mod:`~singa_core.contracts.sgemm_split`), where the product as it stands is the
    faster (AMD EPYC, 2 threads: a GRU step's 50 x 512 x 1536 0.63 against 0.71 ms, the
    MLP's 64 x 784 x 2500 1.78 against 1.92-1.97, the other MLP shapes even)."""
    from singa_core.contracts import sgemm

    lib = sgemm._chosen or sgemm.chosen()
    return lib is not None and lib.name == "openblas" and not sgemm_split.active()


def _transposed_scratch(n: int, m: int):
    import numpy as np

    cache = getattr(_scratch, "arrays", None)
    if cache is None:
        cache = _scratch.arrays = {}
    t = cache.get((n, m))
    if t is None:
        if len(cache) > 16:
            cache.clear()
        t = cache[(n, m)] = np.empty((n, m), dtype=np.float32)
    return t


def _gemm_generic(a, b, c, beta: float, alpha: float = 1.0) -> None:
    """Any device: the array module's product, then the accumulation."""
    p = a @ b
    if alpha != 1.0:
        p *= c.dtype.type(alpha)
    if beta == 0.0:
        c[...] = p
    else:
        if beta != 1.0:
            c *= c.dtype.type(beta)
        c += p


def _gemm_cuda(a, b, c, beta: float, alpha: float = 1.0, rt=None) -> None:
    """cuBLAS's SGEMM with alpha and beta: one launch (``rt.gemm``)."""
    rt.gemm(a, b, c, float(alpha), float(beta))


def _gemm_fits(a, b, c, beta: float, alpha: float = 1.0) -> bool:
    """cuBLAS's layouts: ``a`` and ``b`` C- or F-contiguous (a transposed view counts),
    ``c`` C-contiguous, one dtype."""
    return (
        c.flags.c_contiguous
        and a.dtype == b.dtype == c.dtype
        and all(m.flags.c_contiguous or m.flags.f_contiguous for m in (a, b))
    )


def _define_gemm() -> None:
    from singa_core.contracts.kernels import define_kernel

    define_kernel(
        "gemm",
        host=_gemm_host,
        cuda=_gemm_cuda,
        fits=_gemm_fits,
        generic=_gemm_generic,
        doc="c = alpha·a @ b + beta·c (one cuBLAS call on a GPU, one cblas call on the host)",
    )


_define_gemm()


def gemm_acc(a, b, c) -> None:
    """``c += a @ b`` in place (one GEMM with beta = 1, no temporary), with numpy's own BLAS.

    ``a`` and ``b`` may be transposed views (``x.T``); ``c`` must be C-contiguous float32.
    Layers accumulating parameter gradients over unrolled time steps (``kAggGrad``) use it.
    Falls back to numpy when the layout or dtype does not allow a direct call. Device
    arrays go through the kernel ``gemm`` (cuBLAS with beta = 1 on a GPU).
    """
    if _host(a, b, c):
        if c.flags.c_contiguous and _call_sgemm(a, b, c, 1.0, 1.0):
            return
        c += a @ b
        return
    from singa_core.contracts.kernels import kernels_for

    kernels_for(c).gemm(a, b, c, 1.0)


_CBLAS_A_MATRIX, _CBLAS_B_MATRIX, _CBLAS_PACKED = 161, 162, 151


def _own_packing_threads() -> int | None:
    """The threads singa's packed GEMM (:mod:`~singa_core.contracts.packed_gemm`) runs a
    product on where it takes the chosen OpenBLAS's place: as many as OpenBLAS's GEMMs are
    cut over (:mod:`~singa_core.contracts.sgemm_split`), or one where OpenBLAS runs one;
    None where it does not apply (another library, OpenBLAS's own threads, the CPU)."""
    from singa_core.contracts import sgemm as library

    lib = library._chosen or library.chosen()
    if lib is None or lib.name != "openblas" or not packed_gemm.applies():
        return None
    if sgemm_split.active():
        return sgemm_split.parts()
    return 1 if openblas_threads() == 1 else None


def _packed_gemm():
    """The chosen SGEMM library's packed-GEMM functions (MKL's), or None."""
    from singa_core.contracts import sgemm as library

    lib = library._chosen or library.chosen()
    return None if lib is None else lib.packed


class FixedOperand:
    """The right-hand operand ``b`` of a run of products ``a·b`` (each ``a`` of ``rows``
    rows) that all take the same ``b``: a recurrent weight over the time steps of a
    sequence. ``set(b)`` after ``b``'s values change, then ``gemm(a, fixed, c, beta=...)``.

    On the host ``set`` packs ``b`` once, into a buffer kept from call to call, and each
    product reads the packed copy: a plain ``cblas_sgemm`` repacks ``b`` at every call,
    which dominates products of few rows (a GRU step's 50 x 512 x 1536). With MKL chosen,
    MKL's own packed GEMM (``cblas_sgemm_pack`` / ``cblas_sgemm_compute``: 0.58-0.76 of
    the time, 1 and 2 threads); with OpenBLAS on an AVX2 CPU, singa's
    (:mod:`singa_core.contracts.packed_gemm`: 0.75-0.83). Anywhere else (OpenBLAS on
    another CPU or running its own threads, a device, another ``a``) the products are
    plain :func:`gemm` calls with ``b``: the same launches on a device."""

    __slots__ = ("rows", "b", "_buf", "_dims", "_own")

    def __init__(self, rows: int) -> None:
        self.rows = int(rows)
        self.b = None
        self._buf = None  # the packed copy of b (float32 words), kept between sets
        self._dims = None  # (n, k, compute) of b packed by MKL, or None
        self._own = None  # (n, k, threads) of b packed by singa's packed_gemm, or None

    @staticmethod
    def packs() -> bool:
        """Whether host operands are packed (MKL's packed GEMM, or singa's where it
        applies): each then keeps a packed copy about the size of ``b`` (for memory
        estimates)."""
        return _packed_gemm() is not None or _own_packing_threads() is not None

    def set(self, b) -> None:
        """``b`` (a 2-D view; kept, not copied) is the operand from now on."""
        import numpy as np

        self.b, self._dims, self._own = b, None, None
        if not (_host(b) and b.ndim == 2 and b.dtype == np.float32 and self.rows > 0):
            return
        if 0 in b.shape:
            return
        packed, layout = _packed_gemm(), _blas_operand(b)
        if packed is None:
            self._set_own(b)
            return
        if layout is None:
            return
        size, pack, compute = packed
        k, n = b.shape
        words = -(-int(size(_CBLAS_B_MATRIX, self.rows, n, k)) // 4)
        self._reserve(words)
        trans = _TRANS if layout[0] else _NO_TRANS
        pack(_ROW_MAJOR, _CBLAS_B_MATRIX, trans, self.rows, n, k, 1.0, b.ctypes.data,
             max(layout[1], 1), self._buf.ctypes.data)  # fmt: skip
        self._dims = (n, k, compute)

    def _reserve(self, words: int) -> None:
        import numpy as np

        if self._buf is None or self._buf.size < words:
            self._buf = np.empty(words, dtype=np.float32)

    def _set_own(self, b) -> None:
        threads = _own_packing_threads()
        if threads is None:
            return
        k, n = b.shape
        self._reserve(packed_gemm.packed_size(k, n))
        if packed_gemm.pack(b, self._buf, threads):
            self._own = (n, k, threads)

    def multiply(self, a, c, beta: float, alpha: float) -> None:
        """``c = alpha·a·b + beta·c`` (:func:`gemm` with this operand)."""
        if self._own is not None:
            n, k, threads = self._own
            if _host(a, c) and packed_gemm.multiply(self._buf, k, n, a, c, alpha, beta, threads):
                return
        elif self._dims is not None and alpha == 1.0 and self._compute(a, c, beta):
            return
        gemm(a, self.b, c, beta=beta, alpha=alpha)

    def _compute(self, a, c, beta: float) -> bool:
        import numpy as np

        n, k, compute = self._dims
        if not (
            _host(a, c)
            and a.ndim == c.ndim == 2
            and a.dtype == c.dtype == np.float32
            and a.shape == (self.rows, k)
            and c.shape == (self.rows, n)
        ):
            return False
        la, lc = _blas_operand(a), _blas_operand(c)
        if la is None or lc is None or lc[0]:
            return False
        compute(_ROW_MAJOR, _TRANS if la[0] else _NO_TRANS, _CBLAS_PACKED, self.rows, n, k,
                a.ctypes.data, max(la[1], 1), self._buf.ctypes.data, 0, beta, c.ctypes.data,
                max(lc[1], 1))  # fmt: skip
        return True


def gemm(a, b, c, *, beta: float = 0.0, alpha: float = 1.0) -> None:
    """``c = alpha·a @ b + beta·c`` in place, with the host's chosen SGEMM
    (:mod:`singa_core.contracts.sgemm`: numpy's OpenBLAS or MKL), on strided 2-D views.

    Unlike ``np.dot(out=)``, every operand may be a block of a larger array as long as one
    of its axes has unit stride (BLAS's leading dimension): the convolutions multiply
    shifted windows of their column buffers and accumulate into them this way, without
    copies. ``beta`` is 0 (overwrite) or 1 (accumulate) in practice. Falls back to numpy
    (with a temporary) when the layout or dtype does not allow a direct call; device arrays
    go through the kernel ``gemm``. ``b`` may be a :class:`FixedOperand`.
    """
    if type(b) is FixedOperand:
        b.multiply(a, c, beta, alpha)
        return
    if _host(a, b, c):
        _gemm_host(a, b, c, beta, alpha)
        return
    from singa_core.contracts.kernels import kernels_for

    if alpha == 1.0:
        kernels_for(c).gemm(a, b, c, beta)
    else:
        kernels_for(c).gemm(a, b, c, beta, alpha)
