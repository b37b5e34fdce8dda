"""kGRU over all unrolled time steps at once (a :class:`singa_core.sequences.SequenceRun`).

The copies ``0#gru … T−1#gru`` of an unrolled GRU compute, one by one, six products per
step and per direction. Run together (``GRULayer.sequence_run``), with ``X`` the ``T·B``
input rows of all steps and the weights stacked as ``W = [W_z; W_r; W_c]`` (``3H × V``) and
``U = [U_z; U_r; U_c]`` (``3H × H``):

* forward: ``G = X·Wᵀ`` for every step in one GEMM; then per step ``P_t = h_{t−1}·Uᵀ`` (one
  GEMM) and one kernel (``gru_step_forward``) turning ``G_t``, ``P_t`` and the biases into
  the gates (kept in ``G_t``) and ``h_t`` (copy t's ``data``);
* backward, from the last step down: one kernel (``gru_step_backward``) gives the gate
  gradients ``Dx_t = [dz | dr | dc]`` and ``Dh_t = [dz | dr | dc ⊙ r]`` and the direct part
  ``g ⊙ z`` of ``h_{t−1}``'s gradient, then one GEMM adds ``Dh_t·U`` to it; the weight
  gradients are then ``[X | 1]ᵀ·Dx`` (the input weights' transposed, and the biases' as
  its last row) and ``Dhᵀ·[h_0 … h_{T−2}]``: one GEMM each over all ``T·B`` rows, added
  into the nine Param gradients; the input's gradient is ``Dx·W`` in one GEMM.

The per-step products all take the same ``Uᵀ`` (forward) or ``U`` (backward): each is a
``blas.FixedOperand``, packed once per pass instead of at every product (by MKL, or by
singa's own packed GEMM with OpenBLAS on an AVX2 CPU: ``contracts/packed_gemm.py``).

Where every input row is one-hot (char-rnn's kOneHot), the composite kernel
``one_hot_rows`` has the host make ``G = X·Wᵀ`` a gather of W's columns (the same values)
and ``Xᵀ·Dx`` a scatter-add of Dx's rows (``_one_hot_rows.py``): 1 GFLOP of char-rnn's
step becomes two passes over 15 MB. A GPU keeps the GEMMs.

Tried and not kept (2026-11-30, AMD EPYC, OpenBLAS, 2 threads): the batch's rows cut
across two host threads, each running its half's per-step products on one BLAS thread
and its own element-wise passes (a row's recurrence reads only that row): 50 forward
steps 44-52 ms against 46-50 whole, since a 25-row product on one thread (0.70 ms) is no
faster than the 50-row one on two (0.66).

The formulas are kGRU's (see plugins/layers/gru.py); the kernels keep its order of
operations, so a step's gates are the copy's, and the sums over the steps differ only in
float32 rounding. A copy's gradient buffer ``grad2`` (written by a GRU consumer other than
the next step, e.g. a stacked GRU) is added as the copy-by-copy path adds it.
"""

from __future__ import annotations

import threading
import types

import numpy as np
from singa_builtins.layers import _one_hot_rows  # noqa: F401 - defines its kernels
from singa_builtins.layers.sigmoid import sigmoid_forward

from singa_core.blas import FixedOperand, gemm
from singa_core.cuda import BLOCK, CUPY, elementwise_source, grid_for
from singa_core.jit import Compiled, parallel_ready, serial_or_split
from singa_core.kernels import define_kernel
from singa_core.layer import kAggGrad
from singa_core.param import DTYPE
from singa_core.sequences import SequenceRun

# -- the kernels of one time step ------------------------------------------------------------
#: a step's passes run on the host's threads (blocks of rows) from this many hidden units
#: (rows x H; char-rnn's 50 x 512 = 25,600): a parallel region costs a few µs
SPLIT_MIN = 1 << 13


def gru_step_forward_host(g, p, bz, br, bc, h, out, has_bias) -> None:
    """The host's step: the compiled passes (numba) where they can run, else numpy's."""
    jit = compiled() if isinstance(out, np.ndarray) else None
    if jit is None or not _dense(g, p, bz, br, bc, h, out):
        gru_step_forward_numpy(g, p, bz, br, bc, h, out, has_bias)
        return
    rows, hdim = out.shape
    e = _exp_scratch(rows, 2 * hdim)
    split = jit.split if rows >= 2 else None
    size, bias = rows * hdim, bool(has_bias)
    serial_or_split(jit.gates_in, split and split.gates_in, size, SPLIT_MIN, g, p, bz, br, bias, e)
    np.exp(e, out=e)  # numpy's vectorised exp, as the numpy path's sigmoid uses
    serial_or_split(jit.gates_mid, split and split.gates_mid, size, SPLIT_MIN, g, p, bc, bias, e)
    c = g[:, 2 * hdim :]
    np.tanh(c, out=c)
    serial_or_split(jit.gates_out, split and split.gates_out, size, SPLIT_MIN, g, h, out)


def gru_step_backward_host(grad, grad2, rec, g, p, h, dx, dh, rec_prev) -> None:
    jit = compiled() if isinstance(rec, np.ndarray) else None
    if jit is None or not _dense(grad, grad2, rec, g, p, h, dx, dh, rec_prev):
        gru_step_backward_numpy(grad, grad2, rec, g, p, h, dx, dh, rec_prev)
    else:
        split = jit.split.backward if jit.split is not None and rec.shape[0] >= 2 else None
        args = (grad, grad2, rec, g, p, h, dx, dh, rec_prev)
        serial_or_split(jit.backward, split, rec.size, SPLIT_MIN, *args)


def gru_forward_host(h, z, tz, r, tr, c, hu_c, bz, br, bc, out, has_bias) -> None:
    """From the six products (``z = x·W_zᵀ``, ``tz = h·U_zᵀ``, likewise ``r``/``tr``, ``c =
    x·W_cᵀ``, ``hu_c = h·U_cᵀ``): the gates ``z``, ``r``, ``c`` in place and ``out = z ⊙
    (h − c) + c``; ``tz`` ends as scratch."""
    for gate, t, b in ((z, tz, bz), (r, tr, br)):
        gate += t
        if has_bias:
            gate += b
        sigmoid_forward(gate, gate)
    np.multiply(r, hu_c, out=tz)
    c += tz
    if has_bias:
        c += bc
    np.tanh(c, out=c)
    np.subtract(h, c, out=tz)  # h = z ⊙ (h_prev − c) + c
    tz *= z
    np.add(tz, c, out=out)


def gru_step_forward_numpy(g, p, bz, br, bc, h, out, has_bias) -> None:
    """``g`` (B×3H): ``x·Wᵀ`` of the step, becomes ``[z | r | c]``; ``p`` (B×3H): ``h·Uᵀ``
    (its first block ends as scratch, the last, ``h·U_cᵀ``, is kept for backward);
    ``out = z ⊙ (h − c) + c``."""
    H = out.shape[-1]
    z, r, c = g[:, :H], g[:, H : 2 * H], g[:, 2 * H :]
    tz, tr, hu = p[:, :H], p[:, H : 2 * H], p[:, 2 * H :]
    gru_forward_host(h, z, tz, r, tr, c, hu, bz, br, bc, out, has_bias)  # kGRU's own step


def gru_step_backward_numpy(grad, grad2, rec, g, p, h, dx, dh, rec_prev) -> None:
    """The step's gradient ``grad + grad2 + rec`` (``rec``: from the next step) through the
    gates ``g = [z | r | c]``: ``dx = [dz | dr | dc]``, ``dh = [dz | dr | dc ⊙ r]``,
    ``rec_prev = (grad + grad2 + rec) ⊙ z``."""
    H = rec.shape[-1]
    z, r, c = g[:, :H], g[:, H : 2 * H], g[:, 2 * H :]
    hu = p[:, 2 * H :]
    dz, dr, dc = dx[:, :H], dx[:, H : 2 * H], dx[:, 2 * H :]
    sz, sr, dcr = dh[:, :H], dh[:, H : 2 * H], dh[:, 2 * H :]
    gv = rec_prev
    np.add(grad, grad2, out=gv)
    gv += rec
    # dc = (1 − z)(1 − c²) g
    np.multiply(c, c, out=dc)
    np.subtract(1.0, dc, out=dc)
    np.subtract(1.0, z, out=sz)
    dc *= sz
    dc *= gv
    # dz = (h − c) · (1 − z)z · g
    sz *= z
    np.subtract(h, c, out=dz)
    dz *= sz
    dz *= gv
    # dr = dc · (h·U_cᵀ) · (1 − r)r
    np.subtract(1.0, r, out=sr)
    sr *= r
    np.multiply(dc, hu, out=dr)
    dr *= sr
    np.copyto(sz, dz)
    np.copyto(sr, dr)
    np.multiply(dc, r, out=dcr)
    gv *= z


# -- the host's compiled passes (numba, ``singa-classic[fast]``; ``SINGA_NUMBA=0``: numpy's) --
# The numpy path makes about twenty passes over a step's arrays each way; these make five
# forward (three compiled, numpy's vectorised exp and tanh between them) and one backward,
# with the same float32 operations in the same order: the results are bit for bit the
# numpy path's. Serial loops, as the pooling kernels' (no thread pool beside OpenBLAS's).
_SCRATCH = threading.local()


def compiled():
    """The compiled passes, or None (numba missing, or ``SINGA_NUMBA=0``)."""
    return _PASSES.get()


def compiles() -> bool:
    """Whether :func:`compiled` will give the passes (without compiling them now)."""
    return _PASSES.available()


def _exp_scratch(rows: int, cols: int) -> np.ndarray:
    cache = getattr(_SCRATCH, "arrays", None)
    if cache is None:
        cache = _SCRATCH.arrays = {}
    e = cache.get((rows, cols))
    if e is None:
        e = cache[(rows, cols)] = np.empty((rows, cols), dtype=DTYPE)
    return e


def _compile():
    import numba

    # error_model="numpy": a float division by zero gives inf as numpy's does, instead of
    # Python's check and exception, which kept the reciprocals below from vectorising
    jit = numba.njit(cache=True, nogil=True, fastmath=False, error_model="numpy")
    one = np.float32(1.0)
    # Each pass walks a step's rows and, within a row, contiguous 1-D slices: loops LLVM
    # vectorises (indexing the 2-D arrays in the inner loop, as before 2026-11-29, left the
    # backward pass scalar: 80 µs for 50 x 512 units alone, now 30; the reciprocals 40 → 10)

    @jit
    def neg_sum(a, b, bias, has_bias, out):
        if has_bias:
            for k in range(out.shape[0]):
                out[k] = -((a[k] + b[k]) + bias[k])
        else:
            for k in range(out.shape[0]):
                out[k] = -(a[k] + b[k])

    @jit
    def gates_in(g, p, bz, br, has_bias, e):
        """e = −(x·Wᵀ + h·Uᵀ + b) of the update and reset gates."""
        rows, hdim = e.shape[0], e.shape[1] // 2
        for row in range(rows):
            gr, pr, er = g[row], p[row], e[row]
            neg_sum(gr[:hdim], pr[:hdim], bz, has_bias, er[:hdim])
            neg_sum(gr[hdim : 2 * hdim], pr[hdim : 2 * hdim], br, has_bias, er[hdim:])

    @jit
    def gates_mid(g, p, bc, has_bias, e):
        """z, r = 1/(e + 1) (e = exp(−…) now); c's argument r ⊙ h·U_cᵀ + x·W_cᵀ + b_c."""
        rows, hdim = e.shape[0], e.shape[1] // 2
        for row in range(rows):
            gr, er = g[row], e[row]
            zr = gr[: 2 * hdim]
            for k in range(2 * hdim):
                zr[k] = one / (er[k] + one)
            r, c, hu = gr[hdim : 2 * hdim], gr[2 * hdim :], p[row, 2 * hdim :]
            if has_bias:
                for k in range(hdim):
                    c[k] = (c[k] + r[k] * hu[k]) + bc[k]
            else:
                for k in range(hdim):
                    c[k] = c[k] + r[k] * hu[k]

    @jit
    def gates_out(g, h, out):
        rows, hdim = out.shape
        for row in range(rows):
            z, c, hr, o = g[row, :hdim], g[row, 2 * hdim :], h[row], out[row]
            for k in range(hdim):
                o[k] = (hr[k] - c[k]) * z[k] + c[k]

    @jit
    def backward(grad, grad2, rec, g, p, h, dx, dh, rec_prev):
        rows, hdim = rec.shape
        for row in range(rows):
            gr, g2, rc, hr, rp = grad[row], grad2[row], rec[row], h[row], rec_prev[row]
            z, r, c = g[row, :hdim], g[row, hdim : 2 * hdim], g[row, 2 * hdim :]
            hu = p[row, 2 * hdim :]
            dz, dr, dc = dx[row, :hdim], dx[row, hdim : 2 * hdim], dx[row, 2 * hdim :]
            sz, sr, sc = dh[row, :hdim], dh[row, hdim : 2 * hdim], dh[row, 2 * hdim :]
            for k in range(hdim):
                gv = (gr[k] + g2[k]) + rc[k]
                zv, rv, cv = z[k], r[k], c[k]
                dcv = ((one - cv * cv) * (one - zv)) * gv
                dzv = ((hr[k] - cv) * ((one - zv) * zv)) * gv
                drv = (dcv * hu[k]) * ((one - rv) * rv)
                dz[k] = dzv
                dr[k] = drv
                dc[k] = dcv
                sz[k] = dzv
                sr[k] = drv
                sc[k] = dcv * rv
                rp[k] = gv * zv

    passes = types.SimpleNamespace(
        gates_in=gates_in, gates_mid=gates_mid, gates_out=gates_out, backward=backward,
        split=None,
    )  # fmt: skip
    if not parallel_ready():
        return passes

    # the same passes over ``parts`` blocks of rows, one a thread (each element is
    # computed by the same operations: the same values on any thread count)
    par = numba.njit(cache=True, nogil=True, parallel=True)

    @par
    def split_gates_in(g, p, bz, br, has_bias, e, parts):
        rows = e.shape[0]
        for q in numba.prange(parts):
            lo, hi = rows * q // parts, rows * (q + 1) // parts
            gates_in(g[lo:hi], p[lo:hi], bz, br, has_bias, e[lo:hi])

    @par
    def split_gates_mid(g, p, bc, has_bias, e, parts):
        rows = e.shape[0]
        for q in numba.prange(parts):
            lo, hi = rows * q // parts, rows * (q + 1) // parts
            gates_mid(g[lo:hi], p[lo:hi], bc, has_bias, e[lo:hi])

    @par
    def split_gates_out(g, h, out, parts):
        rows = out.shape[0]
        for q in numba.prange(parts):
            lo, hi = rows * q // parts, rows * (q + 1) // parts
            gates_out(g[lo:hi], h[lo:hi], out[lo:hi])

    @par
    def split_backward(grad, grad2, rec, g, p, h, dx, dh, rec_prev, parts):
        rows = rec.shape[0]
        for q in numba.prange(parts):
            lo, hi = rows * q // parts, rows * (q + 1) // parts
            backward(
                grad[lo:hi], grad2[lo:hi], rec[lo:hi], g[lo:hi], p[lo:hi], h[lo:hi],
                dx[lo:hi], dh[lo:hi], rec_prev[lo:hi],
            )  # fmt: skip

    passes.split = types.SimpleNamespace(
        gates_in=split_gates_in, gates_mid=split_gates_mid, gates_out=split_gates_out,
        backward=split_backward,
    )  # fmt: skip
    return passes


_PASSES = Compiled(_compile)


_FORWARD = elementwise_source(
    "singa_gru_step_forward",
    "float* g, float* p, const float* bz, const float* br, const float* bc, const float* h, "
    "float* out",
    "long long hdim, int has_bias",
    """
const long long row = i / hdim, k = i % hdim, base = row * 3 * hdim + k;
float zv = g[base] + p[base];
float rv = g[base + hdim] + p[base + hdim];
float cv = g[base + 2 * hdim];
if (has_bias) { zv = zv + bz[k]; rv = rv + br[k]; }
zv = 1.0f / (expf(-zv) + 1.0f);
rv = 1.0f / (expf(-rv) + 1.0f);
cv = cv + __fmul_rn(rv, p[base + 2 * hdim]);
if (has_bias) cv = cv + bc[k];
cv = tanhf(cv);
g[base] = zv; g[base + hdim] = rv; g[base + 2 * hdim] = cv;
out[i] = __fmul_rn(h[i] - cv, zv) + cv;
""",
)

_BACKWARD = elementwise_source(
    "singa_gru_step_backward",
    "const float* grad, const float* grad2, const float* rec, const float* g, const float* p, "
    "const float* h, float* dx, float* dh, float* rec_prev",
    "long long hdim",
    """
const long long row = i / hdim, k = i % hdim, base = row * 3 * hdim + k;
const float gv = (grad[i] + grad2[i]) + rec[i];
const float zv = g[base], rv = g[base + hdim], cv = g[base + 2 * hdim];
const float dcv = __fmul_rn(__fmul_rn(1.0f - zv, 1.0f - __fmul_rn(cv, cv)), gv);
const float dzv = __fmul_rn(__fmul_rn(h[i] - cv, __fmul_rn(1.0f - zv, zv)), gv);
const float drv = __fmul_rn(__fmul_rn(dcv, p[base + 2 * hdim]), __fmul_rn(1.0f - rv, rv));
dx[base] = dzv; dx[base + hdim] = drv; dx[base + 2 * hdim] = dcv;
dh[base] = dzv; dh[base + hdim] = drv; dh[base + 2 * hdim] = __fmul_rn(dcv, rv);
rec_prev[i] = __fmul_rn(gv, zv);
""",
)


def _dense(*arrays) -> bool:
    return all(a.flags.c_contiguous for a in arrays)


def gru_step_forward_cuda(g, p, bz, br, bc, h, out, has_bias, rt=CUPY) -> None:
    n, hdim = int(out.size), int(out.shape[-1])
    args = (g, p, bz, br, bc, h, out, np.int64(n), np.int64(hdim), np.int32(bool(has_bias)))
    rt.kernel(_FORWARD, "singa_gru_step_forward")(grid_for(n), BLOCK, args)


def gru_step_backward_cuda(grad, grad2, rec, g, p, h, dx, dh, rec_prev, rt=CUPY) -> None:
    n, hdim = int(rec.size), int(rec.shape[-1])
    args = (grad, grad2, rec, g, p, h, dx, dh, rec_prev, np.int64(n), np.int64(hdim))
    rt.kernel(_BACKWARD, "singa_gru_step_backward")(grid_for(n), BLOCK, args)


gru_step_forward_cuda.source = _FORWARD
gru_step_backward_cuda.source = _BACKWARD

define_kernel(
    "gru_step_forward",
    host=gru_step_forward_host,
    generic=gru_step_forward_numpy,
    cuda=gru_step_forward_cuda,
    fits=lambda *args: _dense(*args[:7]),
    doc="one time step of a GRU run: gates and output from the stacked products",
)
define_kernel(
    "gru_step_backward",
    host=gru_step_backward_host,
    generic=gru_step_backward_numpy,
    cuda=gru_step_backward_cuda,
    fits=lambda *args: _dense(*args[:9]),
    doc="one time step of a GRU run: the stacked gate gradients and h_prev's direct part",
)


# -- the run ----------------------------------------------------------------------------------
class GRURun(SequenceRun):
    """Copies ``0 … T−1`` of one kGRU, each but the first fed by the one before (see the
    module doc); ``out`` and ``grad``: the copies' ``(T, B, H)`` arenas. Its source is the
    copies' inputs as ``T·B`` rows."""

    def __init__(self, copies, out, grad) -> None:
        super().__init__(copies)
        first = copies[0]
        self.first = first
        T, B, H, V = len(copies), first.batchsize, first.hdim, first.vdim
        self.T, self.B, self.H, self.V = T, B, H, V
        xp = first.xp
        self.out = out  # (T, B, H): the copies' data
        self.grad = grad  # (T, B, H): the copies' grad (from their other consumers)
        self.outs = [c.data for c in copies]
        # a copy's grad2 is written only by a GRU taking it as its previous state other than
        # the next copy (whose gradient the run passes itself): where there is none, the
        # steps read one small zero array instead of T arrays of zeros from memory
        self.grad2 = [c.grad2 for c in copies]
        self._grad2_written = any(
            c._state_consumers - {id(n) for n in copies[t + 1 : t + 2]}
            for t, c in enumerate(copies)
        )
        self.grads = [c.grad for c in copies]
        self.gates = xp.zeros((T, B, 3 * H), dtype=DTYPE)  # x·Wᵀ, then [z | r | c]
        self.hprod = xp.zeros((T, B, 3 * H), dtype=DTYPE)  # h_{t−1}·Uᵀ
        self.w = xp.empty((3 * H, V), dtype=DTYPE)  # [W_z; W_r; W_c]
        self.u = xp.empty((3 * H, H), dtype=DTYPE)  # [U_z; U_r; U_c]
        # Uᵀ of the T forward products h_{t−1}·Uᵀ, and U of the backward's Dh_t·U: each
        # packed once per pass where the host's BLAS can (blas.FixedOperand)
        self.ut_fixed, self.u_fixed = FixedOperand(B), FixedOperand(B)
        self._back = None  # the backward's arrays, made on its first call
        # the hot column of each input row where the kernel one_hot_rows finds them (host)
        self._hot = np.empty(T * B, dtype=np.int64)
        self._hot_rows = None

    def _hprev(self, t: int):
        return self.first._h0 if t == 0 else self.outs[t - 1]

    def forward(self, phase, srcs):
        first, H = self.first, self.H
        x = srcs[0].data.reshape(self.T * self.B, self.V)
        p = [q.value for q in first.params]
        np.concatenate((p[0], p[1], p[2]), axis=0, out=self.w)
        np.concatenate((p[3], p[4], p[5]), axis=0, out=self.u)
        bz, br, bc = (p[6], p[7], p[8]) if first.has_bias else (self.w[0],) * 3
        gates2 = self.gates.reshape(self.T * self.B, 3 * H)
        # one-hot inputs (char-rnn's kOneHot): x·Wᵀ is a gather of W's columns, and the
        # backward's xᵀ·Dx a scatter-add (plugins/layers/_one_hot_rows.py); else the GEMM
        self._hot_rows = hot = first.kernels.one_hot_rows(x, self._hot)
        if hot is None:
            gemm(x, self.w.T, gates2)
        else:
            first.kernels.gather_columns(self.w, hot, gates2)
        step = first.kernels.gru_step_forward
        ut = self.ut_fixed
        ut.set(self.u.T)
        for t in range(self.T):
            h = self._hprev(t)
            gemm(h, ut, self.hprod[t])
            step(self.gates[t], self.hprod[t], bz, br, bc, h, self.outs[t], first.has_bias)

    def _backward_arrays(self):
        if self._back is None:
            xp, T, B, H, V = self.first.xp, self.T, self.B, self.H, self.V
            self._back = {
                "dx": xp.empty((T, B, 3 * H), dtype=DTYPE),
                "dh": xp.empty((T, B, 3 * H), dtype=DTYPE),
                "rec": [xp.empty((B, H), dtype=DTYPE), xp.empty((B, H), dtype=DTYPE)],
                "zero": xp.zeros((B, H), dtype=DTYPE),
                # [W_z | W_r | W_c]ᵀ's gradient over all steps, and the biases' as its row V
                "gwt": xp.empty((V + 1, 3 * H), dtype=DTYPE),
                "gu": xp.empty((3 * H, H), dtype=DTYPE),
                "ut": xp.empty((H, 3 * H), dtype=DTYPE),  # [U_zᵀ | U_rᵀ | U_cᵀ]
                "x1": xp.ones((T * B, V + 1), dtype=DTYPE),  # [x | 1] of all steps
            }
        return self._back

    def backward(self, phase, srcs):
        first, T, B, H = self.first, self.T, self.B, self.H
        a = self._backward_arrays()
        dx, dh, rec = a["dx"], a["dh"], a["rec"]
        step = first.kernels.gru_step_backward
        # Uᵀ laid out in memory (one copy), so that Dh_t·U is a product with a transposed
        # operand: the host's BLAS runs these few-row products faster (blas.FEW_ROWS)
        ut = a["ut"]
        p = first.params
        np.concatenate((p[3].value.T, p[4].value.T, p[5].value.T), axis=1, out=ut)
        u = self.u_fixed
        u.set(ut.T)
        current = zero = a["zero"]
        grad2 = self.grad2 if self._grad2_written else [zero] * T
        for t in range(T - 1, -1, -1):
            prev = rec[t % 2]
            step(
                self.grads[t], grad2[t], current, self.gates[t], self.hprod[t],
                self._hprev(t), dx[t], dh[t], prev,
            )  # fmt: skip
            if t > 0:
                gemm(dh[t], u, prev, beta=1.0)  # h_{t−1}'s gradient: + Dh_t·U
            current = prev
        dx2 = dx.reshape(T * B, 3 * H)
        params = first.params
        agg = bool(phase & kAggGrad)
        # the weight gradients over all steps, then into the nine Params. The input side's
        # transposed, [x | 1]ᵀ·Dx: its long side is then the product's N (faster than
        # Dxᵀ·x, an output of 65 columns for char-rnn: 2.3 against 3.7 ms at 2 threads),
        # and the ones column gives the biases' gradient (the column sums of Dx) in the same
        # product
        x, V, gwt = srcs[0].data.reshape(T * B, self.V), self.V, a["gwt"]
        hot = self._hot_rows
        if hot is not None:  # one-hot rows: the rows of Dx added by their hot column
            first.kernels.add_rows_at(dx2, hot, gwt[:V])
            if first.has_bias:  # every row of Dx is in one of them
                gwt[:V].sum(axis=0, out=gwt[V])
        elif first.has_bias:
            x1 = a["x1"]
            x1[:, :V] = x
            gemm(x1.T, dx2, gwt)
        else:
            gemm(x.T, dx2, gwt[:V])
        self._add(params[0:3], gwt[:V].T, agg)
        gu = a["gu"]
        if T > 1:
            gemm(dh[1:].reshape((T - 1) * B, 3 * H).T, self.out[:-1].reshape((T - 1) * B, H), gu)
            if not first._h0_zero:
                gemm(dh[0].T, first._h0, gu, beta=1.0)
        else:
            gemm(dh[0].T, first._h0, gu)
        self._add(params[3:6], gu, agg)
        if first.has_bias:
            self._add(params[6:9], gwt[V], agg)
        gx = srcs[0].grad_for(self)
        if gx is not None:
            gemm(dx2, self.w, gx.reshape(T * B, self.V))

    def _add(self, params, stacked_grad, agg: bool) -> None:
        """Without ``kAggGrad`` the gradient of the whole sequence is written (the copies
        would each overwrite it)."""
        add_stacked(params, stacked_grad, self.H, agg)


def add_stacked(params, stacked_grad, hdim: int, agg: bool) -> None:
    """Param k's gradient (+)= block k (``hdim`` rows) of ``stacked_grad`` (the gates'
    ``[z | r | c]`` order), added with ``kAggGrad``, else written."""
    for k, q in enumerate(params):
        block = stacked_grad[k * hdim : (k + 1) * hdim]
        if agg:
            q.grad += block
        else:
            q.grad[...] = block
