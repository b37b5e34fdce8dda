"""Compiled host passes for ReLU's and LRN's kernels (optional: numba, the ``fast`` extra).

The numpy host implementations of ``relu_backward``, ``lrn_forward`` and ``lrn_backward``
make one pass over memory per ufunc (two for ReLU's backward, about ten for LRN's each
way); these make one, computing every element with the same float32 operations in the
same order (no fused multiply-adds, the window sums in ``lrn.window_sum``'s order), so
their results are identical. They run on numpy arrays that share one dense memory layout
(:func:`singa_core.cuda.dense_alike`: the NCHW views of batch-innermost buffers qualify),
the contiguous innermost axis in the innermost loop, a 0-based slice, so that it
vectorises, over as many threads as the BLAS runs (:func:`singa_core.jit.threaded`).
Other arguments (a device's arrays, mixed layouts) take the numpy path, as does
everything when numba is missing or ``SINGA_NUMBA=0`` (:func:`kernels` returns None).

The kernel ``host_jit`` (composite) tells a layer whether its host kernels run compiled
code, so that it charges numba's compiler to the memory estimate once
(``_pool_kernels.JIT_BYTES``); a GPU says no.
"""

from __future__ import annotations

import numpy as np
from singa_builtins.layers._pool_kernels import kernels as pool_kernels

from singa_core.cuda import dense_alike
from singa_core.jit import Compiled, threaded
from singa_core.kernels import define_kernel


def _compile():
    import numba

    # numpy's error model: a division by zero gives inf or NaN as numpy's does, with no
    # test per element (which would stop the loops from vectorising)
    jit = numba.njit(cache=True, nogil=True, fastmath=False, error_model="numpy")
    pjit = numba.njit(cache=True, nogil=True, fastmath=False, error_model="numpy", parallel=True)
    prange = numba.prange

    @pjit
    def relu_forward(x, out):
        # max(x, 0) as np.maximum computes it: NaN kept, -0.0 gives +0.0
        zero = x.dtype.type(0.0)
        n = x.size
        step = 16384
        for blk in prange((n + step - 1) // step):
            lo, hi = blk * step, min(n, (blk + 1) * step)
            xs, os_ = x[lo:hi], out[lo:hi]
            for e in range(xs.size):  # from 0: provably no negative index, so it vectorises
                v = xs[e]
                os_[e] = v if (v > zero or v != v) else zero

    @pjit
    def relu_backward(y, g, out):
        # g·[y > 0] as numpy's g·mask computes it (a NaN or infinite g stays NaN)
        zero, one = g.dtype.type(0.0), g.dtype.type(1.0)
        n = y.size
        step = 16384
        for blk in prange((n + step - 1) // step):
            lo, hi = blk * step, min(n, (blk + 1) * step)
            ys, gs, os_ = y[lo:hi], g[lo:hi], out[lo:hi]
            for e in range(ys.size):
                os_[e] = gs[e] * (one if ys[e] > zero else zero)

    # every loop below runs over 0-based slices: an index the compiler cannot prove
    # non-negative (i0 + i) keeps numba's negative-index wrap-around in the loop, which
    # stops it from vectorising (measured: 5-6x slower)
    @jit
    def add_row(rd, square, row, i0, i1):
        d, r = rd[i0:i1], row[i0:i1]
        if square:
            for i in range(r.size):
                r[i] = r[i] + d[i] * d[i]
        else:
            for i in range(r.size):
                r[i] = r[i] + d[i]

    @jit
    def window_sum_row(src, o, ch, half, square, row, i0, i1):
        # row = the window sum of src[o, :, i] (squared where ``square``) around ch, in
        # lrn.window_sum's order: the channel, the next one, the later ones, the earlier ones
        nc = src.shape[1]
        r0, out = src[o, ch][i0:i1], row[i0:i1]
        m = out.size
        if half > 0 and ch + 1 < nc:
            r1 = src[o, ch + 1][i0:i1]
            if square:
                for i in range(m):
                    out[i] = r0[i] * r0[i] + r1[i] * r1[i]
            else:
                for i in range(m):
                    out[i] = r0[i] + r1[i]
        elif square:
            for i in range(m):
                out[i] = r0[i] * r0[i]
        else:
            for i in range(m):
                out[i] = r0[i]
        for d in range(2, half + 1):
            if ch + d < nc:
                add_row(src[o, ch + d], square, row, i0, i1)
        for d in range(1, half + 1):
            if ch - d >= 0:
                add_row(src[o, ch - d], square, row, i0, i1)

    @jit
    def blocks(no, ni, t):
        # (outer, inner) work items: the inner axis cut in pieces of about 4096 elements
        # (rows of a piece stay in cache), each piece a loop iteration a thread takes; as
        # many pieces per outer index as makes the items a multiple of the t threads
        nb = max(1, ni // 4096)
        while (no * nb) % t != 0 and nb < ni:
            nb += 1
        return nb, (ni + nb - 1) // nb

    @pjit
    def lrn_forward(x, y, norm, powb, half, a, k, mode, threads):
        # (outer, C, inner) views, one channel row (of one piece) at a time
        no, nc, ni = x.shape
        nb, size = blocks(no, ni, threads)
        for item in prange(no * nb):
            o, i0 = item // nb, (item % nb) * size
            i1 = min(ni, i0 + size)
            for ch in range(nc):
                window_sum_row(x, o, ch, half, True, norm[o, ch], i0, i1)
                nr, pr = norm[o, ch][i0:i1], powb[o, ch][i0:i1]
                yr, xr = y[o, ch][i0:i1], x[o, ch][i0:i1]
                m = nr.size
                for i in range(m):
                    nr[i] = nr[i] * a + k  # two roundings: no fused multiply-add
                if mode == 1:
                    for i in range(m):
                        r = np.sqrt(nr[i])
                        pr[i] = r * np.sqrt(r)
                elif mode == 2:
                    for i in range(m):
                        pr[i] = np.sqrt(nr[i])
                else:  # mode 3 (beta 1); others take numpy's path
                    for i in range(m):
                        pr[i] = nr[i]
                for i in range(m):
                    yr[i] = xr[i] / pr[i]

    @pjit
    def lrn_backward(x, y, g, norm, powb, out, tmp, half, c, threads):
        no, nc, ni = x.shape
        nb, size = blocks(no, ni, threads)
        for item in prange(no * nb):
            o, i0 = item // nb, (item % nb) * size
            i1 = min(ni, i0 + size)
            # channel t's g·y/norm (= g·x·norm^(−beta−1)) into tmp, once per element, just
            # before the window of channel t − half, the last to read it, needs it
            for t in range(nc + half):
                if t < nc:
                    gr, yr = g[o, t][i0:i1], y[o, t][i0:i1]
                    nr, tr = norm[o, t][i0:i1], tmp[o, t][i0:i1]
                    for i in range(tr.size):
                        tr[i] = (gr[i] * yr[i]) / nr[i]
                ch = t - half
                if ch < 0:
                    continue
                window_sum_row(tmp, o, ch, half, False, out[o, ch], i0, i1)
                gr, pr = g[o, ch][i0:i1], powb[o, ch][i0:i1]
                xr, outr = x[o, ch][i0:i1], out[o, ch][i0:i1]
                for i in range(outr.size):
                    outr[i] = gr[i] / pr[i] - (outr[i] * xr[i]) * c

    @pjit
    def rows_to_input(col, target, ph, pw, sw, lo, hi):
        # the convolution's row columns col[c, j, hp, ow, b] (input gradients) summed back
        # onto the inputs they were read from, target[c, h, w, b] = the sum over the kernel
        # columns j, in increasing order from zero (as the numpy path's shifted adds), with
        # w = j + sw·ow − pw for lo[j] <= ow < hi[j]; then every position of col that no
        # input reads (padding rows, out-of-range columns) is zeroed for the next forward
        nc, kw, hp_n, ow_n, nb = col.shape
        _, h_n, w_n, _ = target.shape
        zero = col.dtype.type(0.0)
        for c in prange(nc):
            for h in range(h_n):
                for w in range(w_n):
                    t = target[c, h, w]
                    for b in range(nb):
                        t[b] = zero
                    for j in range(kw):
                        q = w + pw - j
                        if q < 0 or q % sw != 0:
                            continue
                        ow = q // sw
                        if ow < lo[j] or ow >= hi[j]:
                            continue
                        src = col[c, j, h + ph, ow]
                        for b in range(nb):
                            t[b] = t[b] + src[b]
            for j in range(kw):
                for hp in range(hp_n):
                    pad_row = hp < ph or hp >= ph + h_n
                    for ow in range(ow_n):
                        if pad_row or ow < lo[j] or ow >= hi[j]:
                            z = col[c, j, hp, ow]
                            for b in range(nb):
                                z[b] = zero

    @pjit
    def fill_rows(x, col, ph, pw, sw, lo, hi):
        # the convolution's row columns from its CHWN input: col[c, j, h + ph, ow, b] =
        # x[c, h, j + sw·ow − pw, b] for lo[j] <= ow < hi[j] (the other positions are
        # padding, zero since set-up and left alone); one input channel a loop iteration
        nc, kw, _, _, nb = col.shape
        _, h_n, _, _ = x.shape
        for c in prange(nc):
            for j in range(kw):
                for h in range(h_n):
                    for ow in range(lo[j], hi[j]):
                        s = x[c, h, j + sw * ow - pw]
                        d = col[c, j, h + ph, ow]
                        for b in range(nb):
                            d[b] = s[b]

    @pjit
    def im2col(xp, col, kh, kw, sh, sw, oh, ow):
        # col[(c, i, j), (y, x, b)] = xp[c, y·sh + i, x·sw + j, b] for the contiguous padded
        # CHWN xp and the contiguous 2-D col: one row of col per loop iteration
        nc, _, _, nb = xp.shape
        for r in prange(nc * kh * kw):
            c, i, j = r // (kh * kw), (r // kw) % kh, r % kw
            cr = col[r]
            for y in range(oh):
                src = xp[c, y * sh + i]
                o = y * ow * nb
                if sw == 1:  # one run of ow·b elements
                    run = ow * nb
                    s = src.reshape(-1)[j * nb : j * nb + run]
                    d = cr[o : o + run]
                    for t in range(run):
                        d[t] = s[t]
                else:
                    for x in range(ow):
                        sr = src[j + x * sw]
                        d = cr[o + x * nb : o + (x + 1) * nb]
                        for b in range(nb):
                            d[b] = sr[b]

    class Kernels:
        pass

    kn = Kernels()
    kn.relu_forward, kn.relu_backward = threaded(relu_forward), threaded(relu_backward)
    kn.lrn_forward, kn.lrn_backward = threaded(lrn_forward), threaded(lrn_backward)
    kn.rows_to_input = threaded(rows_to_input)
    kn.fill_rows = threaded(fill_rows)
    kn.im2col = threaded(im2col)
    return kn


def kernels():
    """The compiled passes, or None (numba missing, or ``SINGA_NUMBA=0``)."""
    return _KERNELS.get()


def _compile_after_pool():
    # the pooling kernels' module chooses numba's thread pool (or finds none)
    return _compile() if pool_kernels() is not None else False


_KERNELS = Compiled(_compile_after_pool)


def memory_order(arrays, axis: int | None = None):
    """The arrays (numpy, one dense layout: :func:`dense_alike`) as views in memory order:
    1-D, or with ``axis`` given, 3-D ``(outer, axis, inner)``; None where they do not
    qualify."""
    if not all(type(a) is np.ndarray for a in arrays) or not dense_alike(arrays):
        return None
    first = arrays[0]
    order = sorted(range(first.ndim), key=lambda d: -abs(first.strides[d]))
    if axis is None:
        return [a.transpose(order).reshape(-1) for a in arrays]
    at = order.index(axis)
    shape = [first.shape[d] for d in order]
    outer = int(np.prod(shape[:at], dtype=np.int64))
    inner = int(np.prod(shape[at + 1 :], dtype=np.int64))
    views = [a.transpose(order).reshape(outer, shape[at], inner) for a in arrays]
    return views if all(v.flags.c_contiguous for v in views) else None


def _host_jit() -> bool:
    """The host: whether the compiled passes run (numba loaded once per process)."""
    return kernels() is not None


define_kernel(
    "host_jit",
    host=_host_jit,
    cuda=lambda: False,
    composite=True,
    doc="whether the host's kernels run compiled (numba) code (charged once per process)",
)
