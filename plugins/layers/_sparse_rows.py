"""Products whose left operand is mostly zeros (MNIST's pixels, a binary sample), on the host.

An RBM multiplies its input batch ``x`` (B × V) twice a step, and its hidden sample ``s``
(B × H, ones and zeros) once::

    out = x·wᵀ        (B × H, w is H × V)           times_wt   the positive phase
    out = α·hᵀ·x      (H × V, h is B × H)           ht_times   the input's half of gW
    out = s·w         (B × V)                       times_w    the negative phase

81% of MNIST's values are zero, and RBM1's hidden sample is 85-90% zeros from its tenth
step on (half at the start); a GEMM multiplies by each of them. These list the left
operand's nonzeros first (a pass over it row by row, over a transposed copy for
``ht_times``'s columns, stopping at the first row past too many; on an AVX2 CPU eight
values at a time without a branch: a compare, and a permutation from a table packs the
nonzeros and their places) and, where at most :func:`max_density` of it is nonzero,
compute with them alone, compiled (numba):

* ``times_wt``: for each block of 32 rows of ``w`` (one thread's work; 64 with AVX-512),
  the block is transposed once into a panel (V × 32, 8 × 8 tiles transposed in
  registers); each row of ``out`` is then a sum of the panel's rows picked by ``x``'s
  nonzeros, weighted by them.
* ``ht_times``: for each block of 32 columns of ``h``, each column ``j`` of ``x`` gives one
  row of a tile (V × 32): the sum of the rows of ``h``'s block picked by the column's
  nonzeros; the tile is then transposed into ``out``'s 32 rows.
* ``times_w``: for each block of 32 columns of ``w``, each row of ``out`` is the sum of
  ``w``'s rows (their 32 values in the block, read where they are) picked by ``s``'s
  nonzeros; the columns past the last multiple of 32 in a plain loop.

The weighted sums run on a block's floats at once in four vectors as wide as the CPU's
(:func:`vector_width`: 8 floats, 16 with AVX-512), two chains of fused multiply-adds (the
even and the odd nonzeros of a row, added at the end), written in LLVM's IR so that the
accumulators stay in registers. Each element of a result is
computed by one thread, in the order of the nonzeros: the same bits on any thread count,
run after run. They differ from a GEMM's in the last bits (another order of the sums, as
another BLAS's would); and a product skips the zeros, so a NaN or an infinity in the
other operand facing a zero stays out of it, where a GEMM would give NaN.

On the 2-core AMD EPYC (AVX2) of issue 47, RBM1's shapes (B 100, V 784, H 1000), MNIST at
19% nonzero: ``x·wᵀ`` 0.79 ms against OpenBLAS's 2.06 on one thread (0.48 against 1.24
on two), ``hᵀ·x`` 0.74 against 1.91 (0.46 against 1.06); ``s·w`` at 10% ones 0.99
against 1.92 (0.57 against 1.05), at 30% 2.99 against 1.95: rows of ``w`` scattered over
memory, hence its lower limit.

Each function returns False, having written nothing, where it does not apply: numba
missing, ``SINGA_NUMBA=0`` or ``SINGA_SPARSE_ROWS=0`` (the GEMM's own bits, for a
comparison), operands that are not C-contiguous float32 host arrays, a
product too small to matter (:data:`MIN_WORK`), or a left operand denser than
:func:`max_density`; the caller then multiplies with its GEMM.

The kernels ``sparse_rows_times_wt`` and ``sparse_rows_times_w`` (composite) are these
products for a layer: the sparse one on the host where it applies, else one GEMM; on a GPU
always the GEMM. kRBMHid's positive phase and kRBMVis's negative phase call them;
kRBMVis's kernel ``rbm_weight_gradient`` uses ``ht_times`` on the host.
"""

from __future__ import annotations

import os
import threading

import numpy as np

from singa_core.blas import gemm
from singa_core.jit import Compiled, use_host_threads
from singa_core.kernels import define_kernel
from singa_core.resources import cpu_flags

__all__ = [
    "ENV_VAR",
    "MIN_WORK",
    "ht_times",
    "index_bytes",
    "max_density",
    "times_w",
    "times_wt",
    "vector_width",
]

#: ``SINGA_SPARSE_ROWS=0`` turns the sparse products off (every product a GEMM)
ENV_VAR = "SINGA_SPARSE_ROWS"

#: the sparse products run from this many multiply-adds of the dense product (smaller
#: ones take microseconds either way)
MIN_WORK = 1 << 18

_LIST = 8  # values the lister compares at once (AVX2's permutes)
_TILE = 8  # the register transposes' tiles: 8 x 8 floats
_MAX_BLOCK = 64  # the widest block (AVX-512), for the index's 32-bit bound


def vector_width() -> int:
    """The floats of the weighted sums' vectors: 16 on a CPU with AVX-512, as wide as its
    GEMMs' kernels, else 8; a block (the rows of ``w`` a thread takes at once) is four of
    them. Read from the CPU's flags, not timed: two runs of a job take the same path."""
    return 16 if "avx512f" in cpu_flags() else 8


def max_density(rows_in_place: bool = False) -> float:
    """The largest share of nonzeros in ``x`` for which a sparse product runs.

    ``times_wt`` and ``ht_times`` cost about as much as a GEMM at half of ``x`` nonzero on
    an AVX2 core (measured: the AMD EPYC above), ``times_w`` (``rows_in_place``: it reads
    rows of ``w`` scattered over memory, not a panel in cache) at a fifth. The sums run on
    vectors as wide as the CPU's GEMM kernels (:func:`vector_width`), so the limits are
    the same on an AVX-512 CPU (not measured there)."""
    return 0.15 if rows_in_place else 0.35


def _vector_listing() -> bool:
    """Whether the nonzeros are listed eight at a time (AVX2's permutes; the CPU's flags,
    and numba compiling for this CPU), else one at a time."""
    import numba

    name, features = numba.config.CPU_NAME, numba.config.CPU_FEATURES
    if name not in (None, "host") or (features is not None and "+avx2" not in features):
        return False
    return "avx2" in cpu_flags()


def _pack_permutations() -> np.ndarray:
    """For each 8-bit mask, the lanes set in it first (in order): ``list8``'s table."""
    lut = np.zeros((1 << _LIST, _LIST), np.int32)
    for mask in range(1 << _LIST):
        lanes = [k for k in range(_LIST) if mask >> k & 1]
        lut[mask, : len(lanes)] = lanes
    return lut.reshape(-1)


_PACK = _pack_permutations()


def _compile(width: int | None = None, eight_at_a_time: bool | None = None):
    """The compiled functions and the block they use: (index_nonzeros, times_wt, ht_times,
    times_w, block), for vectors of :func:`vector_width` floats and the lister
    :func:`_vector_listing` chooses (cached on disk), or for another ``width`` or
    ``eight_at_a_time`` (a check of another CPU's code: not cached)."""
    import numba
    from llvmlite import ir
    from numba import prange, types
    from numba.extending import intrinsic

    machine_listing = _vector_listing()
    if eight_at_a_time is None:
        eight_at_a_time = machine_listing
    cache = width is None and eight_at_a_time == machine_listing  # this CPU's own code
    width = vector_width() if width is None else int(width)
    lanes = 4
    block = lanes * width  # rows of w (columns of h) a thread takes at once
    f32, i32, i64 = ir.FloatType(), ir.IntType(32), ir.IntType(64)
    vec = ir.VectorType(f32, width)
    vec8, ivec8 = ir.VectorType(f32, _LIST), ir.VectorType(i32, _LIST)
    vector_listing = bool(eight_at_a_time)

    def data(context, builder, ty, value):
        return context.make_array(ty)(context, builder, value).data

    def as_i64(builder, v):
        return v if v.type == i64 else builder.sext(v, i64)

    def load_vec(builder, base, at, vtype=vec):
        ld = builder.load(builder.bitcast(builder.gep(base, [at]), vtype.as_pointer()))
        ld.align = 4
        return ld

    def splat(builder, value, vtype):  # value in every lane of a vtype
        n = vtype.count
        one = builder.insert_element(ir.Constant(vtype, ir.Undefined), value, ir.Constant(i32, 0))
        return builder.shuffle_vector(
            one, ir.Constant(vtype, ir.Undefined), ir.Constant(ir.VectorType(i32, n), [0] * n)
        )

    def store_vec(builder, value, base, at):
        st = builder.store(value, builder.bitcast(builder.gep(base, [at]), value.type.as_pointer()))
        st.align = 4

    @intrinsic
    def weighted_rows(typingctx, src, offs, vals, n0, n1, dst, at):
        """``dst[at + l] = Σ_{n0 ≤ n < n1} vals[n]·src[offs[n] + l]`` for l < 32."""
        sig = types.void(src, offs, vals, n0, n1, dst, at)

        def codegen(context, builder, signature, args):
            mod = builder.module
            name = f"llvm.fma.v{width}f32"
            fma = mod.globals.get(name) or ir.Function(
                mod, ir.FunctionType(vec, [vec, vec, vec]), name=name
            )
            tys = signature.args
            srcp, offp = (
                data(context, builder, tys[0], args[0]),
                data(context, builder, tys[1], args[1]),
            )
            valp, dstp = (
                data(context, builder, tys[2], args[2]),
                data(context, builder, tys[5], args[5]),
            )
            first, end = as_i64(builder, args[3]), as_i64(builder, args[4])
            zero = ir.Constant(vec, [0.0] * width)

            def term(n):  # (vals[n] in every lane, the 4 vectors of src's row offs[n])
                s = builder.load(builder.gep(valp, [n]))
                o = as_i64(builder, builder.load(builder.gep(offp, [n])))
                sv = splat(builder, s, vec)
                row = builder.gep(srcp, [o])
                return sv, [
                    load_vec(builder, row, ir.Constant(i64, q * width)) for q in range(lanes)
                ]

            fn = builder.function
            before = builder.block
            head, body = fn.append_basic_block("wr.head"), fn.append_basic_block("wr.body")
            tail, odd = fn.append_basic_block("wr.tail"), fn.append_basic_block("wr.odd")
            done = fn.append_basic_block("wr.done")
            builder.branch(head)
            builder.position_at_end(head)  # two nonzeros a turn: chains a (even), b (odd)
            n = builder.phi(i64)
            acc = [builder.phi(vec) for _ in range(2 * lanes)]
            n.add_incoming(first, before)
            for a in acc:
                a.add_incoming(zero, before)
            two_left = builder.icmp_signed("<", builder.add(n, ir.Constant(i64, 1)), end)
            builder.cbranch(two_left, body, tail)
            builder.position_at_end(body)
            s1, x1 = term(n)
            s2, x2 = term(builder.add(n, ir.Constant(i64, 1)))
            new = [builder.call(fma, [s1, x1[q], acc[q]]) for q in range(lanes)]
            new += [builder.call(fma, [s2, x2[q], acc[lanes + q]]) for q in range(lanes)]
            n.add_incoming(builder.add(n, ir.Constant(i64, 2)), body)
            for a, b in zip(acc, new, strict=True):
                a.add_incoming(b, body)
            builder.branch(head)
            builder.position_at_end(tail)  # one nonzero left, or none
            builder.cbranch(builder.icmp_signed("<", n, end), odd, done)
            builder.position_at_end(odd)
            s3, x3 = term(n)
            last = [builder.call(fma, [s3, x3[q], acc[q]]) for q in range(lanes)]
            builder.branch(done)
            builder.position_at_end(done)
            even = []
            for q in range(lanes):
                ph = builder.phi(vec)
                ph.add_incoming(acc[q], tail)
                ph.add_incoming(last[q], odd)
                even.append(ph)
            out = builder.gep(dstp, [as_i64(builder, args[6])])
            for q in range(lanes):
                total = builder.fadd(even[q], acc[lanes + q])
                store_vec(builder, total, out, ir.Constant(i64, q * width))
            return context.get_dummy_value()

        return sig, codegen

    @intrinsic
    def transpose8(typingctx, src, src_at, src_stride, dst, dst_at, dst_stride):
        """``dst[dst_at + c·dst_stride + r] = src[src_at + r·src_stride + c]``, r, c < 8."""
        sig = types.void(src, src_at, src_stride, dst, dst_at, dst_stride)

        def codegen(context, builder, signature, args):
            tys = signature.args
            srcp, dstp = (
                data(context, builder, tys[0], args[0]),
                data(context, builder, tys[3], args[3]),
            )
            s_at, s_st, d_at, d_st = (as_i64(builder, args[k]) for k in (1, 2, 4, 5))

            def shuffle(a, b, idx):
                mask = ir.Constant(ir.VectorType(ir.IntType(32), 8), idx)
                return builder.shuffle_vector(a, b, mask)

            rows = [
                load_vec(
                    builder, srcp, builder.add(s_at, builder.mul(s_st, ir.Constant(i64, r))), vec8
                )
                for r in range(8)
            ]
            pairs = []  # interleaved pairs of rows (0,1), (2,3), (4,5), (6,7): low, high
            for k in range(0, 8, 2):
                pairs.append(shuffle(rows[k], rows[k + 1], [0, 8, 1, 9, 4, 12, 5, 13]))
                pairs.append(shuffle(rows[k], rows[k + 1], [2, 10, 3, 11, 6, 14, 7, 15]))
            lo, hi = [0, 1, 8, 9, 4, 5, 12, 13], [2, 3, 10, 11, 6, 7, 14, 15]
            quads = []
            for a, b in ((0, 2), (4, 6)):
                quads += [shuffle(pairs[a], pairs[b], lo), shuffle(pairs[a], pairs[b], hi)]
                quads += [
                    shuffle(pairs[a + 1], pairs[b + 1], lo),
                    shuffle(pairs[a + 1], pairs[b + 1], hi),
                ]
            cols = [shuffle(quads[k], quads[k + 4], [0, 1, 2, 3, 8, 9, 10, 11]) for k in range(4)]
            cols += [
                shuffle(quads[k], quads[k + 4], [4, 5, 6, 7, 12, 13, 14, 15]) for k in range(4)
            ]
            for c in range(8):
                store_vec(
                    builder,
                    cols[c],
                    dstp,
                    builder.add(d_at, builder.mul(d_st, ir.Constant(i64, c))),
                )
            return context.get_dummy_value()

        return sig, codegen

    jit = numba.njit(cache=cache, nogil=True, boundscheck=False)
    pjit = numba.njit(cache=cache, nogil=True, boundscheck=False, parallel=True)

    if vector_listing:

        @intrinsic
        def list8(typingctx, xf, at, lut, first, step, alpha, offs, vals, n):
            """The nonzeros of ``xf[at:at + 8]`` appended at ``n``, no branch: their
            values times ``alpha`` to ``vals``, ``first + lane·step`` to ``offs`` (8
            lanes stored, the zeros' overwritten later: both need 8 spare places past
            the end), packed by the permutation ``lut[8·mask:]``; returns n + count."""
            sig = types.int64(xf, at, lut, first, step, alpha, offs, vals, n)

            def codegen(context, builder, signature, args):
                mod = builder.module

                def declared(name, ret, params):
                    return mod.globals.get(name) or ir.Function(
                        mod, ir.FunctionType(ret, params), name=name
                    )

                permps = declared("llvm.x86.avx2.permps", vec8, [vec8, ivec8])
                permd = declared("llvm.x86.avx2.permd", ivec8, [ivec8, ivec8])
                ctpop = declared("llvm.ctpop.i32", i32, [i32])
                xp, lp, op, vp = (
                    data(context, builder, signature.args[k], args[k]) for k in (0, 2, 6, 7)
                )
                n = as_i64(builder, args[8])
                v = load_vec(builder, xp, as_i64(builder, args[1]), vec8)
                mask = builder.fcmp_unordered("!=", v, ir.Constant(vec8, [0.0] * _LIST))
                bits = builder.zext(builder.bitcast(mask, ir.IntType(_LIST)), i32)
                at = builder.mul(builder.zext(bits, i64), ir.Constant(i64, _LIST))
                perm = builder.load(builder.bitcast(builder.gep(lp, [at]), ivec8.as_pointer()))
                perm.align = 4
                scaled = builder.fmul(v, splat(builder, args[5], vec8))
                first = splat(builder, builder.trunc(as_i64(builder, args[3]), i32), ivec8)
                step = splat(builder, builder.trunc(as_i64(builder, args[4]), i32), ivec8)
                places = builder.add(
                    first, builder.mul(step, ir.Constant(ivec8, list(range(_LIST))))
                )
                for value, to, permute in ((scaled, vp, permps), (places, op, permd)):
                    st = builder.store(
                        builder.call(permute, [value, perm]),
                        builder.bitcast(builder.gep(to, [n]), value.type.as_pointer()),
                    )
                    st.align = 4
                return builder.add(n, builder.zext(builder.call(ctpop, [bits]), i64))

            return sig, codegen

    else:

        @jit
        def list8(xf, at, lut, first, step, alpha, offs, vals, n):
            """As above, one value at a time (a CPU without AVX2; ``lut`` unread)."""
            for lane in range(_LIST):
                v = xf[at + lane]
                if v != 0.0:
                    offs[n] = first + lane * step
                    vals[n] = v * alpha
                    n += 1
            return n

    @jit
    def index_nonzeros(xf, lines, inner, offset_step, alpha, limit, lut, ptr, offs, vals):
        """The nonzeros of ``x`` (flat ``xf``) line by line: ``lines`` lines of ``inner``
        values, each listed with its place in the line times ``offset_step`` and its value
        times ``alpha``; -1 past ``limit`` nonzeros. Eight values at a time
        (:func:`list8`), the line's rest one by one."""
        n = 0
        whole = inner - inner % _LIST
        for o in range(lines):
            ptr[o] = n
            base = o * inner
            for i in range(0, whole, _LIST):
                n = list8(xf, base + i, lut, i * offset_step, offset_step, alpha, offs, vals, n)
            for i in range(whole, inner):
                v = xf[base + i]
                if v != 0.0:
                    offs[n] = i * offset_step
                    vals[n] = v * alpha
                    n += 1
            if n > limit:
                return -1
        ptr[lines] = n
        return n

    @pjit
    def times_wt(ptr, offs, vals, w, out, panels, rests):
        rows, dim = w.shape
        batch = out.shape[0]
        wf, of = w.reshape(-1), out.reshape(-1)
        whole = dim - dim % 8
        for b in prange((rows + block - 1) // block):
            t = numba.get_thread_id()
            panel, rest = panels[t], rests[t]
            i0 = b * block
            width = min(block, rows - i0)
            if width == block:  # panel[j·32 + k] = w[i0 + k, j]
                for lb in range(0, block, 8):
                    for jb in range(0, whole, 8):
                        transpose8(wf, (i0 + lb) * dim + jb, dim, panel, jb * block + lb, block)
                    for j in range(whole, dim):
                        for k in range(lb, lb + 8):
                            panel[j * block + k] = w[i0 + k, j]
                for r in range(batch):
                    weighted_rows(panel, offs, vals, ptr[r], ptr[r + 1], of, r * rows + i0)
            else:  # the last, narrower block (its lanes past width zero)
                for j in range(dim):
                    for k in range(width):
                        panel[j * block + k] = w[i0 + k, j]
                    for k in range(width, block):
                        panel[j * block + k] = 0.0
                for r in range(batch):
                    weighted_rows(panel, offs, vals, ptr[r], ptr[r + 1], rest, 0)
                    for k in range(width):
                        out[r, i0 + k] = rest[k]

    @pjit
    def ht_times(ptr, offs, vals, h, out, blocks, tiles):
        batch, rows = h.shape
        dim = out.shape[1]
        of = out.reshape(-1)
        whole = dim - dim % 8
        for b in prange((rows + block - 1) // block):
            t = numba.get_thread_id()
            hb, tile = blocks[t], tiles[t]
            i0 = b * block
            width = min(block, rows - i0)
            for r in range(batch):  # hb[r·32 + k] = h[r, i0 + k]
                for k in range(width):
                    hb[r * block + k] = h[r, i0 + k]
                for k in range(width, block):
                    hb[r * block + k] = 0.0
            for j in range(dim):  # tile[j·32 + k] = out[i0 + k, j]
                weighted_rows(hb, offs, vals, ptr[j], ptr[j + 1], tile, j * block)
            if width == block:
                for jb in range(0, whole, 8):
                    for lb in range(0, block, 8):
                        transpose8(tile, jb * block + lb, block, of, (i0 + lb) * dim + jb, dim)
                for j in range(whole, dim):
                    for k in range(block):
                        out[i0 + k, j] = tile[j * block + k]
            else:
                for k in range(width):
                    for j in range(dim):
                        out[i0 + k, j] = tile[j * block + k]

    @pjit
    def times_w(ptr, offs, vals, w, out, rests):
        rows, dim = w.shape
        batch = out.shape[0]
        wf, of = w.reshape(-1), out.reshape(-1)
        for b in prange((dim + block - 1) // block):
            c0 = b * block
            width = min(block, dim - c0)
            if width == block:  # w's rows read where they are: offsets i·dim from column c0
                src = wf[c0:]
                for r in range(batch):
                    weighted_rows(src, offs, vals, ptr[r], ptr[r + 1], of, r * dim + c0)
            else:  # the last, narrower block: a plain loop (no read past w's end)
                rest = rests[numba.get_thread_id()]
                for r in range(batch):
                    for k in range(block):
                        rest[k] = 0.0
                    for n in range(ptr[r], ptr[r + 1]):
                        s, base = vals[n], offs[n] + c0
                        for k in range(width):
                            rest[k] += s * wf[base + k]
                    for k in range(width):
                        out[r, c0 + k] = rest[k]

    return index_nonzeros, times_wt, ht_times, times_w, block


_COMPILED = Compiled(_compile)


class _Scratch(threading.local):
    """One calling thread's index and per-thread panels, kept per shape."""

    def __init__(self) -> None:
        self.index: dict = {}
        self.panels: dict = {}

    def index_for(self, lines: int, size: int):
        """(ptr, offs, vals) for ``size`` values in ``lines`` lines: 8 spare places for
        the packed stores past the last nonzero."""
        key = (lines, size)
        got = self.index.get(key)
        if got is None:
            if len(self.index) > 8:
                self.index.clear()
            got = self.index[key] = (
                np.empty(lines + 1, np.int64),
                np.empty(size + _LIST, np.int32),
                np.empty(size + _LIST, np.float32),
            )
        return got

    def transposed(self, x):
        """``x``ᵀ, C-contiguous, in a buffer kept for its shape."""
        key = ("T", x.shape)
        got = self.panels.get(key)
        if got is None:
            if len(self.panels) > 8:
                self.panels.clear()
            got = self.panels[key] = np.empty(x.shape[::-1], np.float32)
        np.copyto(got, x.T)
        return got

    def panels_for(self, threads: int, first: int, second: int):
        key = (threads, first, second)
        got = self.panels.get(key)
        if got is None:
            if len(self.panels) > 8:
                self.panels.clear()
            got = self.panels[key] = (
                np.empty((threads, first), np.float32),
                np.empty((threads, second), np.float32),
            )
        return got


_scratch = _Scratch()


def _host_f32(*arrays) -> bool:
    return all(
        type(a) is np.ndarray and a.dtype == np.float32 and a.flags.c_contiguous for a in arrays
    )


def _limit(x, rows_in_place: bool = False) -> int:
    return int(max_density(rows_in_place) * x.size)


def _compiled():
    """The compiled functions, or None where the sparse products are off."""
    if os.environ.get(ENV_VAR, "1").strip() == "0":
        return None
    return _COMPILED.get()


def _ready(a, b, out, inner_agrees: bool, shape: tuple, work: int):
    """The compiled functions where a product of the 2-D ``a`` and ``b`` into ``out`` may
    run over ``a``'s nonzeros (C-contiguous float32 host arrays, the inner sizes agreeing,
    ``out`` of ``shape``, ``work`` multiply-adds of the dense product at least
    :data:`MIN_WORK`, offsets within the index's 32 bits); else None."""
    fns = _compiled()
    if fns is None or not _host_f32(a, b, out):
        return None
    if not inner_agrees or out.shape != shape or work < MIN_WORK:
        return None
    if max(a.size, b.size, out.size) * _MAX_BLOCK >= 1 << 31:
        return None
    return fns


def _list(fns, x, offset_step: int, alpha, limit: int):
    """``x``'s nonzeros row by row (each at its column times ``offset_step``, times
    ``alpha``): (ptr, offs, vals), or None past ``limit`` of them."""
    lines, inner = x.shape
    ptr, offs, vals = _scratch.index_for(lines, x.size)
    listed = fns[0](x.reshape(-1), lines, inner, offset_step, np.float32(alpha), limit, _PACK,
                    ptr, offs, vals)  # fmt: skip
    return None if listed < 0 else (ptr, offs, vals)


def _rows_listed(x, w, out, inner_agrees: bool, shape: tuple, offset_step, limit_of):
    """For ``times_wt`` and ``times_w``: where ``x`` (B × K) may be multiplied over its
    nonzeros, list them row by row (each at its column times ``offset_step``, None for the
    compiled functions' block) and return
    (the compiled functions, ptr, offs, vals, threads); else None (too many nonzeros:
    more than ``limit_of(x)``, or :func:`_ready` says no)."""
    fns = _ready(x, w, out, inner_agrees, shape, x.shape[0] * w.size)  # the dense product's
    if fns is None:
        return None
    threads = use_host_threads()
    step = fns[4] if offset_step is None else offset_step
    index = _list(fns, x, step, 1.0, limit_of(x))
    return None if index is None else (fns, *index, threads)


def times_wt(x, w, out) -> bool:
    """``out = x·wᵀ`` over ``x``'s nonzeros (x B × V, w H × V, out B × H); False, with
    nothing written, where it does not apply (the module doc)."""
    if x.ndim != 2 or w.ndim != 2:
        return False
    (batch, dim), rows = x.shape, w.shape[0]
    got = _rows_listed(x, w, out, w.shape[1] == dim, (batch, rows), None, _limit)
    if got is None:
        return False
    fns, ptr, offs, vals, threads = got
    block = fns[4]
    panels, rests = _scratch.panels_for(threads, dim * block, block)
    fns[1](ptr, offs, vals, w, out, panels, rests)
    return True


def times_w(x, w, out) -> bool:
    """``out = x·w`` over ``x``'s nonzeros (x B × H, w H × V, out B × V); False, with
    nothing written, where it does not apply (the module doc)."""
    if x.ndim != 2 or w.ndim != 2:
        return False
    (batch, rows), dim = x.shape, w.shape[1]
    got = _rows_listed(x, w, out, w.shape[0] == rows, (batch, dim), dim, lambda a: _limit(a, True))
    if got is None:
        return False
    fns, ptr, offs, vals, threads = got
    _, rests = _scratch.panels_for(threads, 1, fns[4])
    fns[3](ptr, offs, vals, w, out, rests)
    return True


def ht_times(h, x, out, alpha: float = 1.0) -> bool:
    """``out = alpha·hᵀ·x`` over ``x``'s nonzeros (h B × H, x B × V, out H × V); False,
    with nothing written, where it does not apply (the module doc)."""
    if x.ndim != 2 or h.ndim != 2:
        return False
    (batch, dim), rows = x.shape, h.shape[1]
    fns = _ready(x, h, out, h.shape[0] == batch, (rows, dim), batch * dim * rows)
    if fns is None:
        return False
    threads = use_host_threads()
    # x's columns (the rows of xᵀ), each nonzero at its row times the block in h's block
    block = fns[4]
    index = _list(fns, _scratch.transposed(x), block, alpha, _limit(x))
    if index is None:
        return False
    ptr, offs, vals = index
    blocks, tiles = _scratch.panels_for(threads, batch * block, dim * block)
    fns[2](ptr, offs, vals, h, out, blocks, tiles)
    return True


def index_bytes(batch: int, dim: int) -> int:
    """The host memory the products keep for a ``batch × dim`` left operand: its index
    (row and column forms), the input transposed for the column form and a thread's
    panels; for memory estimates."""
    index = 2 * ((batch * dim + _LIST) * 8 + (max(batch, dim) + 1) * 8) + batch * dim * 4
    return index + 4 * 4 * vector_width() * (2 * dim + batch + 1)


def _times_wt_host(x, w, out) -> None:
    """The host: over ``x``'s nonzeros where it is mostly zeros, else one GEMM."""
    if not times_wt(x, w, out):
        gemm(x, w.T, out)


def _times_wt_device(x, w, out) -> None:
    """A GPU: one GEMM (listing the nonzeros would cost it more launches than it saves)."""
    gemm(x, w.T, out)


def _times_w_host(x, w, out) -> None:
    """The host: over ``x``'s nonzeros where it is mostly zeros, else one GEMM."""
    if not times_w(x, w, out):
        gemm(x, w, out)


def _times_w_device(x, w, out) -> None:
    """A GPU: one GEMM."""
    gemm(x, w, out)


define_kernel(
    "sparse_rows_times_w",
    host=_times_w_host,
    cuda=_times_w_device,
    composite=True,
    doc="out = x·w for a mostly-zero x (an RBM's hidden sample): over x's nonzeros on the "
    "host where at most max_density(True) of x is nonzero, else one GEMM",
)
define_kernel(
    "sparse_rows_times_wt",
    host=_times_wt_host,
    cuda=_times_wt_device,
    composite=True,
    doc="out = x·wᵀ for a data batch x: over x's nonzeros on the host where x is mostly "
    "zeros (MNIST's pixels), else one GEMM",
)
