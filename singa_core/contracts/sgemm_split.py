"""OpenBLAS's GEMMs cut across singa's own thread pool, so that one pool serves a step.

A training step alternates GEMMs with element-wise passes (activations, pooling, LRN,
im2col, the updaters). With OpenBLAS running its own threads, every GEMM leaves them
spinning for about 2^28 cycles (a tenth of a second) waiting for the next one, and a
compiled pass on numba's thread pool then shares the cores with them: on a 2-core AMD
EPYC (AVX2) a 100 x 784 x 1000 GEMM followed by a 3.3-million-value pass on 2 threads took
16 ms where the two alone take 1.3 and 5.2. So the passes ran on one thread there
(:func:`singa_core.contracts.jit.host_threads`).

Here OpenBLAS runs single-threaded and each GEMM big enough to share is cut into ``parts``
blocks of C, one per thread of numba's pool (OpenMP's), each block one ``cblas_sgemm`` call
on its own rows or columns of the operands (no copies: pointer offsets and the same
leading dimensions). The longer side of C is cut, at multiples of 16 values. The pool is
the one the compiled passes use, so products and passes no longer compete; measured on
that machine at 2 threads: the same GEMMs in 0.58-2.3 ms against OpenBLAS's own 0.67-2.2,
and the GEMM-then-pass pair in 6-10 ms against 16.

Each element of C is still one dot product over all of K, computed by OpenBLAS's kernel;
only the block boundaries depend on ``parts``, so results are repeatable for a given thread
count (OpenBLAS's own threading also changes the last bits with the count). A product whose
C is too small to cut but whose K is long (a convolution's weight gradient) is cut along K
instead: each thread's share of K into a block of its own, the blocks then added in order,
so its sums too depend on the thread count alone.

Used only where it can be: the chosen SGEMM is OpenBLAS with 64-bit sizes
(numpy's wheels' ``scipy_cblas_sgemm64_``), numba and a thread pool that several calling
threads may share are there, more than one thread is asked for and numba's pool has as
many. :func:`singa_core.contracts.blas.set_blas_threads` turns it on and off.
"""

from __future__ import annotations

import ctypes

import numpy as np

from singa_core.contracts.jit import Compiled, gemms_on_pool, parallel_ready, use_threads

__all__ = ["MIN_WORK", "active", "call", "parts", "sgemm_address", "sgemm_at", "use"]

#: a GEMM is cut only when ``m·n·k`` reaches this (2 MFLOP, about 25 µs on one core: a
#: parallel region costs a few µs) and its longer side gives each thread 32 values
MIN_WORK = 1 << 20
MIN_SIDE_PER_PART = 32
#: a product whose C is too small to cut (both sides under ``MIN_SIDE_PER_PART`` values a
#: thread) is cut along K where K gives each thread this much: each thread then reads its
#: own share of both operands into its own block of C, and the blocks are added (a
#: convolution's weight gradient: LeNet's first, 20 x 26 over K = 36,864)
MIN_K_PER_PART = 512
_ALIGN = 16  # block boundaries at multiples of 16 floats (64-byte lines of C)

_ROW_MAJOR, _TRANS = 101, 112

_parts = 1  # 1: off (OpenBLAS's own threads, or one thread)
_fn = None  # the cblas_sgemm (64-bit sizes) whose calls are cut
_address = 0  # its address, which the compiled loop calls


def _make_sgemm_at():
    from llvmlite import ir
    from numba import types
    from numba.extending import intrinsic

    @intrinsic
    def sgemm_at(typingctx, fn, order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
        """Call the row-major ``cblas_sgemm`` (64-bit sizes) at address ``fn``."""
        sig = types.void(fn, order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)

        def codegen(context, builder, signature, args):
            i32, i64, f32 = ir.IntType(32), ir.IntType(64), ir.FloatType()
            ptr = ir.IntType(8).as_pointer()
            sizes = [i32, i32, i32, i64, i64, i64, f32, ptr, i64, ptr, i64, f32, ptr, i64]
            fnty = ir.FunctionType(ir.VoidType(), sizes)
            f = builder.inttoptr(args[0], fnty.as_pointer())
            enum = [builder.trunc(v, i32) for v in args[1:4]]
            size = list(args[4:7])
            builder.call(
                f,
                [
                    *enum,
                    *size,
                    args[7],
                    builder.inttoptr(args[8], ptr),
                    args[9],
                    builder.inttoptr(args[10], ptr),
                    args[11],
                    args[12],
                    builder.inttoptr(args[13], ptr),
                    args[14],
                ],
            )
            return context.get_dummy_value()

        return sig, codegen

    return sgemm_at


_SGEMM_AT = Compiled(_make_sgemm_at)


def sgemm_at():
    """A numba intrinsic, ``sgemm_at(fn, order, ta, tb, m, n, k, alpha, a, lda, b, ldb,
    beta, c, ldc)``: compiled code's call of the row-major ``cblas_sgemm`` with 64-bit sizes
    at address ``fn`` (:func:`sgemm_address`), the operands as addresses (ints) and alpha,
    beta as float32; None without numba. For kernels that interleave their own passes with
    GEMMs on blocks they just wrote (a convolution's unfolding, block by block)."""
    return _SGEMM_AT.get()


def sgemm_address() -> int:
    """The address of the host's ``cblas_sgemm`` where compiled code may call it through
    :func:`sgemm_at`: the chosen SGEMM is OpenBLAS with 64-bit sizes (numpy's wheels); 0
    otherwise (MKL, another BLAS, no BLAS found)."""
    from singa_core.contracts import sgemm

    return _address_of(sgemm._chosen or sgemm.chosen())


def _address_of(lib) -> int:
    """``lib``'s ``cblas_sgemm`` address where it is OpenBLAS with 64-bit sizes, else 0."""
    if lib is None or lib.name != "openblas":
        return 0
    argtypes = getattr(lib.sgemm, "argtypes", None) or ()
    if len(argtypes) != 14 or argtypes[3] is not ctypes.c_int64:
        return 0
    return int(ctypes.cast(lib.sgemm, ctypes.c_void_p).value or 0)


def _compile():
    import numba
    from numba import prange

    if not parallel_ready():
        return None
    sgemm_at = _SGEMM_AT.get()

    @numba.njit(inline="always")
    def bound(total, p, parts):  # p/parts of total, rounded to _ALIGN; total for p = parts
        if p >= parts:  # rounding total itself to _ALIGN could drop its last values
            return total
        return min((total * p // parts + _ALIGN // 2) // _ALIGN * _ALIGN, total)

    @numba.njit(parallel=True, nogil=True, cache=True)
    def run_k_parts(fn, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, parts, scratch):
        # part p multiplies columns lo..hi of op(A) by rows lo..hi of op(B): part 0 into C
        # (with beta), the others into their own m x n block of ``scratch`` (summed after)
        for p in prange(parts):
            lo, hi = bound(k, p, parts), bound(k, p + 1, parts)
            if hi > lo:
                aoff = lo * lda if ta == _TRANS else lo
                boff = lo if tb == _TRANS else lo * ldb
                if p == 0:
                    sgemm_at(
                        fn, _ROW_MAJOR, ta, tb, m, n, hi - lo, alpha, a + 4 * aoff, lda,
                        b + 4 * boff, ldb, beta, c, ldc,
                    )  # fmt: skip
                else:
                    sgemm_at(
                        fn, _ROW_MAJOR, ta, tb, m, n, hi - lo, alpha, a + 4 * aoff, lda,
                        b + 4 * boff, ldb, np.float32(0.0), scratch + 4 * (p - 1) * m * n, n,
                    )  # fmt: skip

    @numba.njit(parallel=True, nogil=True, cache=True)
    def run_parts(fn, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, parts, along_n):
        for p in prange(parts):
            if along_n:  # columns lo..hi of C and of op(B)
                lo, hi = bound(n, p, parts), bound(n, p + 1, parts)
                if hi > lo:
                    boff = lo * ldb if tb == _TRANS else lo
                    sgemm_at(
                        fn, _ROW_MAJOR, ta, tb, m, hi - lo, k, alpha, a, lda,
                        b + 4 * boff, ldb, beta, c + 4 * lo, ldc,
                    )  # fmt: skip
            else:  # rows lo..hi of C and of op(A)
                lo, hi = bound(m, p, parts), bound(m, p + 1, parts)
                if hi > lo:
                    aoff = lo if ta == _TRANS else lo * lda
                    sgemm_at(
                        fn, _ROW_MAJOR, ta, tb, hi - lo, n, k, alpha, a + 4 * aoff, lda,
                        b, ldb, beta, c + 4 * lo * ldc, ldc,
                    )  # fmt: skip

    class Runs:  # the two ways of cutting a GEMM
        pass

    runs = Runs()
    runs.along_side = run_parts  # the longer side of C
    runs.along_k = run_k_parts  # K, for a small C and a long K
    return runs


_RUN = Compiled(_compile)


def use(lib, threads: int) -> bool:
    """Cut ``lib``'s GEMMs over ``threads`` threads of numba's pool where that is possible
    (see the module's doc; ``lib`` an :class:`~singa_core.contracts.sgemm.SgemmLibrary`);
    True when it is now on (then OpenBLAS must run one thread), False when off."""
    global _parts, _fn, _address
    _parts, _fn, _address = 1, None, 0
    gemms_on_pool(1)
    address = _address_of(lib)
    if threads <= 1 or not address:
        return False
    try:
        import numba
    except ImportError:
        return False
    if threads > numba.config.NUMBA_NUM_THREADS or _RUN.get() is None:
        return False
    _parts, _fn, _address = int(threads), lib.sgemm, address
    gemms_on_pool(_parts)
    return True


def active() -> bool:
    """Whether GEMMs are being cut over singa's pool now (the library they were cut for is
    still the chosen one)."""
    from singa_core.contracts import sgemm

    return _parts > 1 and (sgemm._chosen is None or sgemm._chosen.sgemm is _fn)


def parts() -> int:
    """The threads a GEMM is cut over (1: not cut)."""
    return _parts


def call(fn, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, c_array=None) -> None:
    """``cblas_sgemm`` (row-major, ctypes ``fn``) with the arguments after its order, cut
    over the pool when :func:`active` for this ``fn`` and the product is big enough, else
    one call. ``c_array``: C as a numpy array (``c`` its address), which lets a product
    with a small C and a long K be cut along K (:data:`MIN_K_PER_PART`)."""
    parts = _parts
    if parts <= 1 or fn is not _fn or m * n * k < MIN_WORK:
        fn(_ROW_MAJOR, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
        return
    if max(m, n) >= MIN_SIDE_PER_PART * parts:
        use_threads(parts)
        _RUN.get().along_side(
            _address, ta, tb, m, n, k, np.float32(alpha), a, lda,
            b, ldb, np.float32(beta), c, ldc, parts, n >= m,
        )  # fmt: skip
        return
    if c_array is None or k < MIN_K_PER_PART * parts:
        fn(_ROW_MAJOR, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
        return
    # each thread its share of K; C = part 0 (with beta) + the others' blocks, in order
    scratch = np.empty((parts - 1, m, n), dtype=np.float32)
    use_threads(parts)
    _RUN.get().along_k(
        _address, ta, tb, m, n, k, np.float32(alpha), a, lda,
        b, ldb, np.float32(beta), c, ldc, parts, scratch.ctypes.data,
    )  # fmt: skip
    for block in scratch:
        np.add(c_array, block, out=c_array)
