"""kGRU: a gated recurrent unit, one time step (SINGA 0.3 §2.3, neuron_layer/gru.cc).

Sources: ``[x, h_prev]`` — the input ``x`` (flattened to ``(B, vdim)``, ``vdim = x.count/B``)
and, optionally, the previous time step's GRU whose output is ``h_prev`` (``(B, hdim)``);
without it ``h_prev`` is the layer's initial state: zeros, or the state a worker carried
over from the previous batch (``carry_state``; kBPTT does so between the steps of a
step-by-step sampling net, where 0.3 restarted from zeros every character).
``hdim = gru_conf.dim_hidden`` (required). The output ``h`` is
``(B, hdim)``.

Params, in the order of the ``param`` entries: 0 ``W_z``, 1 ``W_r``, 2 ``W_c`` (the
input-to-hidden weights, ``(hdim, vdim)``), 3 ``U_z``, 4 ``U_r``, 5 ``U_c`` (hidden-to-hidden,
``(hdim, hdim)``) and, when the layer has 9 ``param`` entries, 6 ``b_z``, 7 ``b_r``,
8 ``b_c`` (``(hdim,)``). As in 0.3 the number of entries decides whether there are biases
(``gru_conf.bias_term`` is not consulted); 6 or 9 entries are accepted, anything else is a
configuration error (0.3 crashed on 7 or 8).

Forward (σ the logistic function, ⊙ the elementwise product)::

    z = σ(x W_zᵀ + b_z + h_prev U_zᵀ)              update gate
    r = σ(x W_rᵀ + b_r + h_prev U_rᵀ)              reset gate
    c = tanh(r ⊙ (h_prev U_cᵀ) + x W_cᵀ + b_c)     candidate (reset applied after the matmul)
    h = z ⊙ h_prev + (1 − z) ⊙ c

Backward, with ``g`` the gradient of the output (both buffers summed, see below)::

    dz = g ⊙ (h_prev − c) ⊙ z(1 − z)      dc = g ⊙ (1 − z) ⊙ (1 − c²)
    dr = dc ⊙ (h_prev U_cᵀ) ⊙ r(1 − r)
    gW_z = dzᵀ x   gU_z = dzᵀ h_prev          gb_z = Σ_rows dz   (same for r with dr)
    gW_c = dcᵀ x   gU_c = (dc ⊙ r)ᵀ h_prev    gb_c = Σ_rows dc
    gx      = dz W_z + dr W_r + dc W_c
    gh_prev = dz U_z + dr U_r + (dc ⊙ r) U_c + g ⊙ z

Gradient buffers: a GRU taking this one as its previous state (the next time step) writes
into a second buffer ``grad2`` (0.3's ``gradvec[1]``); every other consumer, a stacked GRU
included, writes into ``grad``.
Backward uses ``grad + grad2``. The layer is kOneToMany: the net inserts no split layer, so
its output consumer and the next GRU attach to it directly.

Param gradients are overwritten, or accumulated with the ``kAggGrad`` phase flag, as in
kInnerProduct. 0.3 always accumulated (``beta = 1``), which only gives the right result when
the worker zeroes the gradients first; our kBP worker does not zero them (every layer
overwrites), and the unrolled copies of a GRU each own their Param (values shared through
``share_from``, gradients kept apart and summed by the stub), so overwriting is correct here.

Deviations from 0.3:

* ``gh_prev`` includes ``g ⊙ z``; 0.3 added ``z`` instead (a bug: the gradient through the
  update gate's direct path ignored ``g``).
* param gradients are overwritten unless ``kAggGrad`` is set (0.3 always accumulated);
* the param count must be 6 or 9 (a configuration error otherwise);
* only a GRU taking this one as ``h_prev`` writes into ``grad2``. 0.3 gave it to every GRU
  consumer, so a GRU feeding a stacked GRU and its own next step lost one of the two
  gradients.

An unrolled GRU's copies run as one under kBPTT (``sequence_run``, plugins/layers/
_gru_sequence.py): the same arrays and gradients, with the products of all time steps in a
few large GEMMs.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from singa_builtins.layers._gru_sequence import GRURun
from singa_builtins.layers._gru_sequence import compiles as gru_passes_compile
from singa_builtins.layers._pool_kernels import JIT_BYTES, JIT_NOTE
from singa_builtins.layers.sigmoid import sigmoid_forward

from singa_core.blas import gemm_acc
from singa_core.cuda import elementwise_kernel
from singa_core.kernels import define_kernel
from singa_core.layer import Layer, NeuronLayer, kAggGrad
from singa_core.memory import charge as charge_memory
from singa_core.memory import charge_once
from singa_core.param import DTYPE
from singa_core.sequences import run_arrays, shares_params


# -- the gate arithmetic of a step, one launch each way on a GPU --------------------------------
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


def gru_backward_host(grad, grad2, z, r, c, h, hu_c, g, dz, dr, dc, dcr, t) -> None:
    """``g = grad + grad2`` and the gates' gradients ``dz``, ``dr``, ``dc``, ``dcr = dc ⊙
    r`` (see the module doc); ``t`` ends as ``g ⊙ z``, the direct part of h_prev's."""
    np.add(grad, grad2, out=g)
    # dc = g ⊙ (1 − z) ⊙ (1 − c²)
    np.multiply(c, c, out=t)
    np.subtract(1.0, t, out=t)
    np.subtract(1.0, z, out=dc)
    dc *= t
    dc *= g
    # dz = g ⊙ (h_prev − c) ⊙ z(1 − z)
    np.subtract(1.0, z, out=t)
    t *= z
    np.subtract(h, c, out=dz)
    dz *= t
    dz *= g
    # dr = dc ⊙ (h_prev U_cᵀ) ⊙ r(1 − r)
    np.subtract(1.0, r, out=t)
    t *= r
    np.multiply(dc, hu_c, out=dr)
    dr *= t
    np.multiply(dc, r, out=dcr)
    np.multiply(g, z, out=t)


define_kernel(
    "gru_forward",
    host=gru_forward_host,
    generic=gru_forward_host,
    cuda=elementwise_kernel(
        "singa_gru_forward",
        "const float* h, float* z, const float* tz, float* r, const float* tr, float* c, "
        "const float* hu_c, float* out, const float* bz, const float* br, const float* bc",
        """
float zv = z[i] + tz[i];
float rv = r[i] + tr[i];
float cv = c[i];
const int k = (int)(i % hdim);
if (has_bias) { zv = zv + bz[k]; rv = rv + br[k]; }
zv = 1.0f / (expf(-zv) + 1.0f);
rv = 1.0f / (expf(-rv) + 1.0f);
cv = cv + __fmul_rn(rv, hu_c[i]);
if (has_bias) cv = cv + bc[k];
cv = tanhf(cv);
z[i] = zv; r[i] = rv; c[i] = cv;
out[i] = __fmul_rn(h[i] - cv, zv) + cv;
""",
        gru_forward_host,
        scalars="long long hdim, int has_bias",
        pick=lambda h, z, tz, r, tr, c, hu_c, bz, br, bc, out, has_bias: (
            h,
            z,
            tz,
            r,
            tr,
            c,
            hu_c,
            out,
        ),
        extra=lambda h, z, tz, r, tr, c, hu_c, bz, br, bc, out, has_bias: (
            (bz, br, bc),
            (np.int64(z.shape[-1]), np.int32(bool(has_bias))),
        ),
    ),
    doc="a GRU step's gates and output from its six products (one launch on a GPU)",
)
define_kernel(
    "gru_backward",
    host=gru_backward_host,
    generic=gru_backward_host,
    cuda=elementwise_kernel(
        "singa_gru_backward",
        "const float* grad, const float* grad2, const float* z, const float* r, "
        "const float* c, const float* h, const float* hu_c, float* g, float* dz, float* dr, "
        "float* dc, float* dcr, float* t",
        """
const float gv = grad[i] + grad2[i];
const float zv = z[i], rv = r[i], cv = c[i];
const float dcv = __fmul_rn(__fmul_rn(1.0f - zv, 1.0f - __fmul_rn(cv, cv)), gv);
g[i] = gv;
dc[i] = dcv;
dz[i] = __fmul_rn(__fmul_rn(h[i] - cv, __fmul_rn(1.0f - zv, zv)), gv);
dr[i] = __fmul_rn(__fmul_rn(dcv, hu_c[i]), __fmul_rn(1.0f - rv, rv));
dcr[i] = __fmul_rn(dcv, rv);
t[i] = __fmul_rn(gv, zv);
""",
        gru_backward_host,
    ),
    doc="a GRU step's gate gradients (one launch on a GPU)",
)

_ROLES = ("w_z_hx", "w_r_hx", "w_c_hx", "w_z_hh", "w_r_hh", "w_c_hh", "b_z", "b_r", "b_c")


class GRULayer(NeuronLayer):
    type_names = ("kGRU",)
    placement = "device"
    num_srclayers = (1, 2)
    one_to_many = True
    recurrent = True

    def setup(self, srcs):
        self.expect_srcs(srcs)
        conf = self.conf.gru_conf
        if not self.conf.HasField("gru_conf") or not conf.HasField("dim_hidden"):
            raise self.error(
                f"layer '{self.name}' (kGRU) needs gru_conf.dim_hidden",
                field="gru_conf",
                help="add `gru_conf { dim_hidden: N }`",
            )
        hdim = int(conf.dim_hidden)
        if hdim <= 0:
            raise self.error(
                f"layer '{self.name}': gru_conf.dim_hidden must be positive, got {hdim}",
                field="gru_conf.dim_hidden",
                help="set gru_conf.dim_hidden to the number of hidden units, e.g. 512",
            )
        nparams = len(self.conf.param)
        if nparams not in (6, 9):
            raise self.error(
                f"layer '{self.name}' (kGRU) needs 6 param entries (W_z, W_r, W_c, U_z, U_r, "
                f"U_c) or 9 (plus b_z, b_r, b_c), got {nparams}",
                field="param",
                help="list the params in the order w_z_hx, w_r_hx, w_c_hx, w_z_hh, w_r_hh, "
                "w_c_hh[, b_z, b_r, b_c]",
            )
        x = srcs[0].data
        if x is None or x.ndim == 0 or x.shape[0] == 0:
            raise self.error(
                f"layer '{self.name}': source '{srcs[0].name}' has no data to connect to",
                field="srclayers",
                help="give it a source layer that outputs data",
            )
        B = int(x.shape[0])
        self.batchsize, self.vdim, self.hdim = B, int(x.size // B), hdim
        self._state_consumers: set[int] = set()  # the GRUs taking this one as h_prev
        if len(srcs) == 2 and isinstance(srcs[1], GRULayer):
            srcs[1]._state_consumers.add(id(self))
        if len(srcs) == 2:
            h = srcs[1].data
            if h is None or h.size != B * hdim or (h.ndim > 0 and h.shape[0] != B):
                shape = None if h is None else tuple(h.shape)
                raise self.error(
                    f"layer '{self.name}': the previous hidden state '{srcs[1].name}' has "
                    f"shape {shape}, expected ({B}, {hdim})",
                    field="srclayers",
                    help="the second source of a kGRU layer must be the previous time "
                    "step's kGRU layer with the same dim_hidden",
                )
        self.alloc((B, hdim))
        # written by a consumer that is a GRU (none when predicting: no gradients)
        self.grad2 = np.zeros_like(self.data) if self.grad is not None else None
        vdim = self.vdim
        shapes = [(hdim, vdim)] * 3 + [(hdim, hdim)] * 3 + [(hdim,)] * 3
        for i in range(nparams):
            self.create_param(i, shapes[i], _ROLES[i])
        self.has_bias = nparams == 9

        slot = self.ctx.sequence
        if slot is not None and slot.index == 0:  # what a run of all copies holds
            steps = (slot.arena.length, B, 3 * hdim)
            for what in ("run gates, all steps", "run hidden products, all steps"):
                charge_memory(self, "scratch", steps, what=what)
            for what in ("run input-side gate gradients", "run hidden-side gate gradients"):
                charge_memory(self, "scratch", steps, what=what, training_only=True)
            if self.device.is_host and gru_passes_compile():
                charge_once(self, "numba-jit", JIT_BYTES, row="numba's JIT compiler",
                            note=JIT_NOTE)  # fmt: skip

        # h_prev without a previous GRU: zeros, or a carried state
        self._h0 = self.xp.zeros((B, hdim), dtype=DTYPE)
        self._h0_zero = True  # whether _h0 is zeros (a run then skips its gradient terms)
        self._work = None  # the copy-by-copy passes' buffers, made when they first run

    def _buffers(self) -> SimpleNamespace:
        """The work buffers of this copy's own forward and backward passes (12 of (B, H),
        2 of (B, V)), made on first use: a run of all unrolled copies (``GRURun``) keeps
        its own and never asks, so its copies hold none."""
        if self._work is None:
            B, hdim, vdim, xp = self.batchsize, self.hdim, self.vdim, self.xp

            def buf(*shape):
                return xp.zeros(shape, dtype=DTYPE)

            self._work = SimpleNamespace(
                z=buf(B, hdim), r=buf(B, hdim), c=buf(B, hdim),
                hu_c=buf(B, hdim),  # h_prev U_cᵀ
                t=buf(B, hdim),  # h_prev U_zᵀ, then scratch
                tr=buf(B, hdim),  # h_prev U_rᵀ
                g=buf(B, hdim),  # grad + grad2
                dz=buf(B, hdim), dr=buf(B, hdim), dc=buf(B, hdim),
                dcr=buf(B, hdim),  # dc ⊙ r
                gh=buf(B, hdim),  # h_prev gradient when the buffer is not contiguous
                gx=buf(B, vdim),  # x gradient when the buffer is not contiguous
                tx=buf(B, vdim),  # scratch
                ones=xp.ones(B, dtype=DTYPE),
            )  # fmt: skip
        return self._work

    def carry_state(self, last: Layer | None = None) -> None:
        np.copyto(self._h0, (last or self).data)
        self._h0_zero = False

    def reset_state(self) -> None:
        self._h0.fill(0.0)
        self._h0_zero = True

    @classmethod
    def sequence_run(cls, copies, srcs):
        """Copies fed one by one (copy i ≥ 1 takes copy i − 1 as its previous state) over
        inputs in one arena run as one (``_gru_sequence.GRURun``)."""
        if len(srcs[0]) != 1 or any(
            len(s) != 2 or s[1] is not copies[i - 1] for i, s in enumerate(srcs) if i
        ):
            return None
        a = run_arrays(copies, srcs)
        if a is None or not shares_params(copies):
            return None
        return GRURun(copies, srcs, a.x, a.y, a.g, a.gx)

    def grad_for(self, consumer: Layer) -> np.ndarray | None:
        return self.grad2 if id(consumer) in self._state_consumers else self.grad

    # -- helpers ------------------------------------------------------------------------
    def _x(self, srcs) -> np.ndarray:
        return srcs[0].data.reshape(self.batchsize, self.vdim)

    def _hprev(self, srcs) -> np.ndarray:
        if len(srcs) < 2:
            return self._h0
        return srcs[1].data.reshape(self.batchsize, self.hdim)

    def to_onnx(self, g, inputs):
        x = g.reshape(inputs[0], (self.vdim,), f"{self.name}/x")
        if len(inputs) > 1:  # an unrolled copy: the previous step's output
            h = inputs[1]
        else:  # the carried state: a graph input (zeros start a sequence) and output
            h = g.state(f"{self.name}/state", (self.hdim,), batch_of=x)
        w = [g.param(q) for q in self.params]

        def affine(src, k: int, name: str) -> str:  # src · P_kᵀ
            return g.add("Gemm", [src, w[k]], name=f"{self.name}/{name}", transB=1)

        gates = []
        for k, gate in ((0, "z"), (1, "r")):
            s = g.add("Add", [affine(x, k, f"x{gate}"), affine(h, k + 3, f"h{gate}")])
            if self.has_bias:
                s = g.add("Add", [s, w[k + 6]])
            gates.append(g.add("Sigmoid", [s], name=f"{self.name}/{gate}"))
        z, r = gates
        c = g.add("Add", [g.add("Mul", [r, affine(h, 5, "hc")]), affine(x, 2, "xc")])
        if self.has_bias:
            c = g.add("Add", [c, w[8]])
        c = g.add("Tanh", [c], name=f"{self.name}/c")
        # h = z ⊙ (h_prev − c) + c
        out = g.add("Add", [g.add("Mul", [z, g.add("Sub", [h, c])]), c], name=self.name)
        if len(inputs) == 1:
            g.state_out(f"{self.name}/state_out", out, (self.hdim,))
        return out

    def forward(self, phase, srcs):
        x, h = self._x(srcs), self._hprev(srcs)
        p = [q.value for q in self.params]
        w = self._buffers()
        z, r, c = w.z, w.r, w.c
        np.dot(x, p[0].T, out=z)
        np.dot(h, p[3].T, out=w.t)
        np.dot(x, p[1].T, out=r)
        np.dot(h, p[4].T, out=w.tr)
        np.dot(h, p[5].T, out=w.hu_c)
        np.dot(x, p[2].T, out=c)
        bz, br, bc = (p[6], p[7], p[8]) if self.has_bias else (w.hu_c,) * 3
        self.kernels.gru_forward(
            h, z, w.t, r, w.tr, c, w.hu_c, bz, br, bc, self.data, self.has_bias
        )

    def _param_grad(self, i: int, a: np.ndarray, b: np.ndarray | None, agg: bool) -> None:
        """Param ``i``'s gradient ``aᵀ b`` (or ``Σ_rows a`` when ``b`` is None), added to
        the gradient in place with ``kAggGrad``, else written over it."""
        grad = self.params[i].grad
        ones = self._buffers().ones
        if agg:
            if b is None:
                gemm_acc(ones[None, :], a, grad.reshape(1, -1))
            else:
                gemm_acc(a.T, b, grad)
        elif b is None:
            np.dot(ones, a, out=grad)
        else:
            np.dot(a.T, b, out=grad)

    def backward(self, phase, srcs):
        x, h = self._x(srcs), self._hprev(srcs)
        p = [q.value for q in self.params]
        w = self._buffers()
        z, r, c, t = w.z, w.r, w.c, w.t
        dz, dr, dc, dcr = w.dz, w.dr, w.dc, w.dcr
        self.kernels.gru_backward(
            self.grad, self.grad2, z, r, c, h, w.hu_c, w.g, dz, dr, dc, dcr, t
        )  # t = g ⊙ z
        agg = bool(phase & kAggGrad)
        for k, (d, dh) in enumerate(((dz, dz), (dr, dr), (dc, dcr))):
            self._param_grad(k, d, x, agg)
            self._param_grad(k + 3, dh, h, agg)
            if self.has_bias:
                self._param_grad(k + 6, d, None, agg)

        buf = srcs[0].grad_for(self)
        if buf is not None:
            self._src_grad(buf, ((dz, p[0]), (dr, p[1]), (dc, p[2])), w.gx, w.tx, None)
        if len(srcs) == 2:
            buf = srcs[1].grad_for(self)
            if buf is not None:
                self._src_grad(buf, ((dz, p[3]), (dr, p[4]), (dcr, p[5])), w.gh, t, t)

    @staticmethod
    def _src_grad(buf, terms, scratch, tmp, extra) -> None:
        """``buf = Σ d·W over terms (+ extra)``; ``tmp`` is a scratch (may be ``extra``)."""
        n = scratch.shape
        out = buf.reshape(n) if buf.flags.c_contiguous else scratch
        if extra is not None:  # fold the extra term in first, tmp is free afterwards
            out[...] = extra
            for d, w in terms:
                out += np.dot(d, w, out=tmp)
        else:
            (d0, w0), *rest = terms
            np.dot(d0, w0, out=out)
            for d, w in rest:
                out += np.dot(d, w, out=tmp)
        if out is scratch:  # a strided view: reshape would copy, so assign instead
            buf[...] = scratch.reshape(buf.shape)
