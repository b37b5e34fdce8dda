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
from singa_builtins.layers._gru_sequence import GRURun, add_stacked
from singa_builtins.layers._gru_sequence import compiles as gru_passes_compile

from singa_core.blas import FixedOperand, gemm
from singa_core.layer import Layer, NeuronLayer, kAggGrad
from singa_core.memory import charge as charge_memory
from singa_core.memory import charge_numba
from singa_core.param import DTYPE
from singa_core.sequences import stacked

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
                charge_numba(self)
            if self.device.is_host and FixedOperand.packs():  # U and Uᵀ packed (MKL or singa's own)
                charge_memory(self, "scratch", (2, 3 * hdim, hdim), what="packed U, Uᵀ")

        # h_prev without a previous GRU: zeros, or a carried state
        self._h0 = self.xp.zeros((B, hdim), dtype=DTYPE)
        self._h0_zero = True  # whether _h0 is zeros (a run then skips its gradient terms)
        self._work = None  # the copy-by-copy passes' buffers, made when they first run

    def _buffers(self) -> SimpleNamespace:
        """The work buffers of this copy's own forward and backward passes, made on first
        use: a run of all unrolled copies (``GRURun``) keeps its own and never asks, so its
        copies hold none. The gates and products are stacked ``[z | r | c]`` as a run's
        are, so one step is the run's step kernels (one GRU cell)."""
        if self._work is None:
            B, H, V, xp = self.batchsize, self.hdim, self.vdim, self.xp

            def buf(*shape):
                return xp.zeros(shape, dtype=DTYPE)

            self._work = SimpleNamespace(
                g=buf(B, 3 * H),  # x·Wᵀ, then the gates [z | r | c]
                p=buf(B, 3 * H),  # h_prev·Uᵀ
                dx=buf(B, 3 * H),  # [dz | dr | dc]
                dh=buf(B, 3 * H),  # [dz | dr | dc ⊙ r]
                zero=buf(B, H),  # no gradient from a next step: it comes through grad2
                direct=buf(B, H),  # g ⊙ z, h_prev's direct gradient
                gw=buf(3 * H, V), gu=buf(3 * H, H), gb=buf(3 * H),
                gh=buf(B, H),  # h_prev gradient when the buffer is not contiguous
                gx=buf(B, V),  # x gradient when the buffer is not contiguous
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
        out, grad = stacked(copies, "data"), stacked(copies, "grad")
        return None if out is None or grad is None else GRURun(copies, out, grad)

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
        w, H = self._buffers(), self.hdim
        for k in range(3):  # the products into their blocks of the stacked arrays
            gemm(x, p[k].T, w.g[:, k * H : (k + 1) * H])
            gemm(h, p[k + 3].T, w.p[:, k * H : (k + 1) * H])
        bz, br, bc = (p[6], p[7], p[8]) if self.has_bias else (w.ones,) * 3
        self.kernels.gru_step_forward(w.g, w.p, bz, br, bc, h, self.data, self.has_bias)

    def flops(self, srcs):
        """The products (a multiply-add counted as 2): forward ``x·Wₖᵀ`` and ``h·Uₖᵀ`` for
        the three gates; backward their weight gradients, the bias gradient where there is
        a bias, and the gradients for the sources that take one."""
        B, H, V = self.batchsize, self.hdim, self.vdim
        products = 2.0 * B * 3 * H * (V + H)
        bwd = products + (2.0 * B * 3 * H if self.has_bias else 0.0)
        if srcs[0].grad_for(self) is not None:
            bwd += 2.0 * B * 3 * H * V
        if len(srcs) == 2 and srcs[1].grad_for(self) is not None:
            bwd += 2.0 * B * 3 * H * H
        return products, bwd

    def backward(self, phase, srcs):
        x, h = self._x(srcs), self._hprev(srcs)
        w, H, B = self._buffers(), self.hdim, self.batchsize
        self.kernels.gru_step_backward(
            self.grad, self.grad2, w.zero, w.g, w.p, h, w.dx, w.dh, w.direct
        )
        agg = bool(phase & kAggGrad)
        gemm(w.dx.T, x, w.gw)
        add_stacked(self.params[0:3], w.gw, H, agg)
        gemm(w.dh.T, h, w.gu)
        add_stacked(self.params[3:6], w.gu, H, agg)
        if self.has_bias:
            gemm(w.ones[None, :], w.dx, w.gb.reshape(1, -1))
            add_stacked(self.params[6:9], w.gb, H, agg)
        p = [q.value for q in self.params]
        buf = srcs[0].grad_for(self)
        if buf is not None:  # gx = Σ_k Dx_k·W_k
            out = buf.reshape(B, self.vdim) if buf.flags.c_contiguous else w.gx
            for k in range(3):
                gemm(w.dx[:, k * H : (k + 1) * H], p[k], out, beta=float(k > 0))
            if out is w.gx:  # a strided view: reshape would copy, so assign instead
                buf[...] = w.gx.reshape(buf.shape)
        if len(srcs) == 2:
            buf = srcs[1].grad_for(self)
            if buf is not None:  # gh = Σ_k Dh_k·U_k + g ⊙ z
                out = buf.reshape(B, H) if buf.flags.c_contiguous else w.gh
                out[...] = w.direct
                for k in range(3):
                    gemm(w.dh[:, k * H : (k + 1) * H], p[k + 3], out, beta=1.0)
                if out is w.gh:
                    buf[...] = w.gh.reshape(buf.shape)
