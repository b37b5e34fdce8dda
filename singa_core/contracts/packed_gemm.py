"""singa's own GEMM for a run of products that all take one right-hand operand, packed once.

A GRU multiplies its hidden state by the same recurrent weight at every time step: 50
products of 50 x 512 x 1536 a pass in char-rnn, forward and backward. ``cblas_sgemm``
repacks that operand (3 MB) at every call; MKL's packed GEMM keeps it packed
(``blas.FixedOperand``), OpenBLAS has no such API. On a CPU with AVX2 and FMA but not
AVX-512 (where OpenBLAS's kernels are 8 floats wide, as these are), singa packs the
operand itself and multiplies with the compiled kernel here (numba, LLVM IR):

* :func:`pack` lays ``b`` (K x N, row- or column-major) out as panels of 16 columns, each
  panel K rows of 16 contiguous floats (the last panel padded with zeros), once per pass;
* :func:`multiply` computes ``c = alpha·a·b + beta·c``: for each panel (the threads share
  the panels out), each block of 6 rows of ``a`` (then the 1-5 left) is 12 accumulators
  of 8 floats held in registers over all of K, fed by two loads of the panel's row and a
  broadcast of each row's ``a[i, k]`` per step of K: 12 fused multiply-adds per 8 loads.

Measured on the 2-core AMD EPYC (AVX2) of issue 47: 50 x 1536 x 512 and 50 x 512 x 1536
in 0.97 and 0.93 ms on one thread (81 and 85 GFLOP/s) against OpenBLAS's 1.16 and 1.11,
and 0.48 and 0.50 ms on two (166 and 158 GFLOP/s) against 0.63 and 0.62.

Each element of ``c`` is one thread's sum over K in order, so the bits are the same on
any thread count and run after run; they differ from a BLAS's in the last bits (another
order of the sums). Where it does not apply (:func:`applies`: numba missing,
``SINGA_NUMBA=0`` or ``SINGA_PACKED_GEMM=0``, another CPU, MKL chosen, OpenBLAS running
its own threads) the caller keeps its BLAS call.
"""

from __future__ import annotations

import os
import threading

import numpy as np

from singa_core.contracts.jit import Compiled, use_threads
from singa_core.contracts.resources import cpu_flags

__all__ = ["ENV_VAR", "PANEL", "applies", "multiply", "pack", "packed_size"]

#: ``SINGA_PACKED_GEMM=0`` keeps the BLAS's own GEMM for packed operands
ENV_VAR = "SINGA_PACKED_GEMM"

#: columns of ``b`` in a panel (two 8-float vectors)
PANEL = 16
_VEC = 8
_ROWS = 6  # rows of a (and c) a kernel call takes: 12 accumulators of the 16 registers


def packed_size(k: int, n: int) -> int:
    """The floats of ``b`` (K x N) packed: K rows of every panel, N padded to 16."""
    return k * (-(-n // PANEL) * PANEL)


def applies(cpu=None) -> bool:
    """Whether products with a packed operand run here: numba, not turned off, a CPU with
    AVX2 and FMA and without AVX-512 (whose BLAS kernels are twice as wide: not measured
    against these), numba compiling for this CPU."""
    if os.environ.get(ENV_VAR, "1").strip() == "0" or not _COMPILED.available():
        return False
    flags = cpu_flags() if cpu is None else cpu
    return {"avx2", "fma"} <= flags and "avx512f" not in flags and _host_target()


def _host_target() -> bool:
    import numba

    name, features = numba.config.CPU_NAME, numba.config.CPU_FEATURES
    return name in (None, "host") and (features is None or "+avx2" in features)


def _compile():
    import numba
    from llvmlite import ir
    from numba import prange, types
    from numba.extending import intrinsic

    f32, i32, i64 = ir.FloatType(), ir.IntType(32), ir.IntType(64)
    vec = ir.VectorType(f32, _VEC)

    def data(context, builder, ty, value):
        return context.make_array(ty)(context, builder, value).data

    def splat(builder, value):
        one = builder.insert_element(ir.Constant(vec, ir.Undefined), value, ir.Constant(i32, 0))
        mask = ir.Constant(ir.VectorType(i32, _VEC), [0] * _VEC)
        return builder.shuffle_vector(one, ir.Constant(vec, ir.Undefined), mask)

    def vector_at(builder, base, at):
        return builder.bitcast(builder.gep(base, [at]), vec.as_pointer())

    def const(v):
        return ir.Constant(i64, v)

    def rows_kernel(rows: int):
        @intrinsic
        def kernel(typingctx, a, a_at, lda, bp, b_at, k, c, c_at, ldc, alpha, beta):
            """``c[c_at + i·ldc + j] = alpha·Σ_κ a[a_at + i·lda + κ]·bp[b_at + 16κ + j]
            + beta·c[…]`` for i < rows, j < 16 (``c`` not read where beta is 0)."""
            sig = types.void(a, a_at, lda, bp, b_at, k, c, c_at, ldc, alpha, beta)

            def codegen(context, builder, signature, args):
                mod = builder.module
                name = f"llvm.fma.v{_VEC}f32"
                fma = mod.globals.get(name) or ir.Function(
                    mod, ir.FunctionType(vec, [vec, vec, vec]), name=name
                )
                ap, bpp, cp = (
                    data(context, builder, signature.args[q], args[q]) for q in (0, 3, 6)
                )
                a_at, lda, b_at, kdim, c_at, ldc = (args[q] for q in (1, 2, 4, 5, 7, 8))
                fn, before = builder.function, builder.block
                head, body = fn.append_basic_block("k.head"), fn.append_basic_block("k.body")
                done = fn.append_basic_block("k.done")
                builder.branch(head)
                builder.position_at_end(head)
                kk = builder.phi(i64)
                acc = [builder.phi(vec) for _ in range(2 * rows)]
                kk.add_incoming(const(0), before)
                zero = ir.Constant(vec, [0.0] * _VEC)
                for x in acc:
                    x.add_incoming(zero, before)
                builder.cbranch(builder.icmp_signed("<", kk, kdim), body, done)
                builder.position_at_end(body)
                at = builder.add(b_at, builder.mul(kk, const(PANEL)))
                halves = []
                for h in range(2):
                    ld = builder.load(vector_at(builder, bpp, builder.add(at, const(h * _VEC))))
                    ld.align = 4
                    halves.append(ld)
                new = []
                for i in range(rows):
                    where = builder.add(builder.add(a_at, builder.mul(lda, const(i))), kk)
                    av = splat(builder, builder.load(builder.gep(ap, [where])))
                    new += [builder.call(fma, [av, halves[h], acc[2 * i + h]]) for h in range(2)]
                kk.add_incoming(builder.add(kk, const(1)), body)
                for x, y in zip(acc, new, strict=True):
                    x.add_incoming(y, body)
                builder.branch(head)
                builder.position_at_end(done)
                scaled = [builder.fmul(splat(builder, args[9]), x) for x in acc]
                places = []
                for i in range(rows):
                    row = builder.add(c_at, builder.mul(ldc, const(i)))
                    places += [
                        vector_at(builder, cp, builder.add(row, const(h * _VEC))) for h in range(2)
                    ]
                plain, added = fn.append_basic_block("c.set"), fn.append_basic_block("c.add")
                end = fn.append_basic_block("c.end")
                beta_zero = builder.fcmp_ordered("==", args[10], ir.Constant(f32, 0.0))
                builder.cbranch(beta_zero, plain, added)
                builder.position_at_end(plain)
                for value, place in zip(scaled, places, strict=True):
                    builder.store(value, place).align = 4
                builder.branch(end)
                builder.position_at_end(added)
                bv = splat(builder, args[10])
                for value, place in zip(scaled, places, strict=True):
                    old = builder.load(place)
                    old.align = 4
                    builder.store(builder.call(fma, [bv, old, value]), place).align = 4
                builder.branch(end)
                builder.position_at_end(end)
                return context.get_dummy_value()

            return sig, codegen

        return kernel

    k1, k2, k3, k4, k5, k6 = (rows_kernel(r) for r in range(1, _ROWS + 1))
    jit = numba.njit(cache=True, nogil=True, boundscheck=False)
    pjit = numba.njit(cache=True, nogil=True, boundscheck=False, parallel=True)

    @jit
    def rows_of(af, a_at, lda, bp, b_at, k, cf, c_at, ldc, m, alpha, beta):
        """Rows ``0..m`` of one panel's columns: blocks of 6, then the 1-5 left."""
        i = 0
        while i + _ROWS <= m:
            k6(af, a_at + i * lda, lda, bp, b_at, k, cf, c_at + i * ldc, ldc, alpha, beta)
            i += _ROWS
        left = m - i
        a_at, c_at = a_at + i * lda, c_at + i * ldc
        if left == 5:
            k5(af, a_at, lda, bp, b_at, k, cf, c_at, ldc, alpha, beta)
        elif left == 4:
            k4(af, a_at, lda, bp, b_at, k, cf, c_at, ldc, alpha, beta)
        elif left == 3:
            k3(af, a_at, lda, bp, b_at, k, cf, c_at, ldc, alpha, beta)
        elif left == 2:
            k2(af, a_at, lda, bp, b_at, k, cf, c_at, ldc, alpha, beta)
        elif left == 1:
            k1(af, a_at, lda, bp, b_at, k, cf, c_at, ldc, alpha, beta)

    @pjit
    def multiply_panels(af, lda, bp, k, n, cf, ldc, m, alpha, beta, tiles):
        whole = n // PANEL
        panels = -(-n // PANEL)
        zero = np.float32(0.0)
        for p in prange(panels):
            b_at = p * k * PANEL
            if p < whole:
                rows_of(af, 0, lda, bp, b_at, k, cf, p * PANEL, ldc, m, alpha, beta)
            else:  # the last, narrower panel: through a tile, then its columns into c
                tile = tiles[numba.get_thread_id()]
                width = n - p * PANEL
                for i in range(m):
                    rows_of(af, i * lda, lda, bp, b_at, k, tile, 0, PANEL, 1, alpha, zero)
                    at = i * ldc + p * PANEL
                    for j in range(width):
                        if beta == zero:
                            cf[at + j] = tile[j]
                        else:
                            cf[at + j] = beta * cf[at + j] + tile[j]

    @pjit
    def pack_panels(bf, row_step, col_step, k, n, out):
        panels = -(-n // PANEL)
        for p in prange(panels):
            base = p * k * PANEL
            width = min(PANEL, n - p * PANEL)
            if col_step == 1:  # rows of b contiguous: 16 values a row of the panel
                for kk in range(k):
                    src = kk * row_step + p * PANEL
                    for j in range(width):
                        out[base + kk * PANEL + j] = bf[src + j]
                    for j in range(width, PANEL):
                        out[base + kk * PANEL + j] = 0.0
            else:  # columns of b contiguous: each read along K
                for j in range(width):
                    src = (p * PANEL + j) * col_step
                    for kk in range(k):
                        out[base + kk * PANEL + j] = bf[src + kk * row_step]
                for j in range(width, PANEL):
                    for kk in range(k):
                        out[base + kk * PANEL + j] = 0.0

    return multiply_panels, pack_panels


_COMPILED = Compiled(_compile)


def _strides(x):
    """(row step, column step) of a 2-D float32 array in floats, or None where an axis has
    no whole-float step."""
    s0, s1 = x.strides
    if s0 % 4 or s1 % 4:
        return None
    return s0 // 4, s1 // 4


def _base(x):
    """The 1-D array from ``x``'s first element to its last (a view), for the kernels'
    flat offsets."""
    rs, cs = _strides(x)
    span = (x.shape[0] - 1) * rs + (x.shape[1] - 1) * cs + 1
    return np.lib.stride_tricks.as_strided(x, shape=(span,), strides=(4,))


def pack(b, out, threads: int) -> bool:
    """``b`` (K x N float32 host array, one axis of unit stride) packed into ``out`` (at
    least :func:`packed_size` floats); False (nothing written) where it does not apply."""
    made = _COMPILED.get()
    if made is None or type(b) is not np.ndarray or b.ndim != 2 or b.dtype != np.float32:
        return False
    steps = _strides(b)
    if steps is None or 1 not in steps or min(steps) < 1 or 0 in b.shape:
        return False
    k, n = b.shape
    if out.size < packed_size(k, n):
        return False
    use_threads(threads)
    made[1](_base(b), steps[0], steps[1], k, n, out)
    return True


class _Tiles(threading.local):
    """A calling thread's tiles (one per thread of its pool) for the narrow last panel."""

    def __init__(self) -> None:
        self.by_threads: dict = {}

    def get(self, threads: int):
        got = self.by_threads.get(threads)
        if got is None:
            got = self.by_threads[threads] = np.empty((threads, PANEL), np.float32)
        return got


_tiles = _Tiles()


def multiply(packed, k: int, n: int, a, c, alpha: float, beta: float, threads: int) -> bool:
    """``c = alpha·a·b + beta·c`` with ``b`` (K x N) as :func:`pack` left it in ``packed``;
    ``a`` (M x K) and ``c`` (M x N) float32 host arrays with rows of unit stride. False
    (nothing written) where they are not."""
    made = _COMPILED.get()
    if made is None:
        return False
    for x in (a, c):
        if type(x) is not np.ndarray or x.ndim != 2 or x.dtype != np.float32:
            return False
    m = a.shape[0]
    if a.shape[1] != k or c.shape != (m, n) or m == 0:
        return m == 0 and a.shape[1] == k and c.shape == (0, n)
    sa, sc = _strides(a), _strides(c)
    if sa is None or sc is None or (sa[1] != 1 and k > 1) or (sc[1] != 1 and n > 1):
        return False
    if sa[0] < k or sc[0] < n:
        return False
    tiles = _tiles.get(threads)
    use_threads(threads)
    made[0](_base(a), sa[0], packed, k, n, _base(c), sc[0], m, np.float32(alpha),
            np.float32(beta), tiles)  # fmt: skip
    return True
