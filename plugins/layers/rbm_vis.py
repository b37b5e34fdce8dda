"""kRBMVis: the visible layer of an RBM (SINGA 0.3 §2.3 RBMVisLayer, §5.3 CD).

srclayers = [input, the kRBMHid layer] as in 0.3 (the hidden layer comes later in net order:
it is None during setup and filled in by the net), or just [input]: a kRBMHid layer reading
this layer links itself as ``hid_layer`` when it is set up. ``rbm_conf.hdim`` (required) is
the hidden size.
Params: 0 ``weight`` W ``(hdim, vdim)``, 1 ``bias`` b_v ``(vdim,)``; ``vdim`` is the input's
feature size (the input is flattened to ``(B, vdim)``). Phases (bit flags):

* ``kPositive``: ``v_pos = input`` (a copy); the next negative phase is the first Gibbs step;
* ``kNegative``: take the hidden layer's sample ``h`` (``pos_sample`` on the first Gibbs step,
  else ``neg_sample``) and reconstruct ``v_neg = σ(h·W + b_v)`` (probabilities); with
  ``kTest`` also add the metric "Squared Error" = ``Σ(v_pos − v_neg)²/B`` (0.3's ToString
  "Squared Error = <error/counter>").

``backward`` (the CD worker's gradient phase, ``kTrain``) writes the update direction with
h the hidden layer's probabilities::

    gW = (h_negᵀ v_neg − h_posᵀ v_pos)/B,   gb_v = (Σ v_neg − Σ v_pos)/B

(the kernel ``rbm_weight_gradient``: one GEMM over stacked operands, or on the host, where
the input is mostly zeros, its half over the input's nonzeros: ``_sparse_rows``).

Deviations from 0.3: the layer is not flagged as a loss layer (it reports a metric, no
``loss``); ``share_from`` gradients are summed, not averaged (docs/compat.md "share_from
gradients"), so the weight gradient is not halved by the hidden layer's zero contribution.
"""

from __future__ import annotations

import numpy as np
from singa_builtins.layers import sigmoid as _sigmoid  # noqa: F401 - defines its kernels
from singa_builtins.layers._rbm import RBMLayer
from singa_builtins.layers._sparse_rows import ht_times, index_bytes  # and its kernels

from singa_core.blas import gemm
from singa_core.kernels import define_kernel
from singa_core.layer import kNegative, kPositive, kTest
from singa_core.memory import charge as charge_memory
from singa_core.param import DTYPE


def weight_gradient(h_neg, v_neg, h_pos, v_pos, inv_b, hs, vs, gw, gb) -> None:
    """``gw = (h_negᵀ·v_neg − h_posᵀ·v_pos)/B``, ``gb = (Σ v_neg − Σ v_pos)/B``: one GEMM
    of K = 2B over the stacked operands ``hs = [h_neg; h_pos]``, ``vs = [v_neg; −v_pos]/B``
    (scratch buffers of the layer), without temporaries or extra passes over ``gw``."""
    batch = v_pos.shape[0]
    hs[:batch] = h_neg
    hs[batch:] = h_pos
    np.multiply(v_neg, inv_b, out=vs[:batch])
    np.multiply(v_pos, -inv_b, out=vs[batch:])
    gemm(hs.T, vs, gw)
    vs.sum(axis=0, out=gb)  # (Σ v_neg − Σ v_pos)/B


def weight_gradient_host(h_neg, v_neg, h_pos, v_pos, inv_b, hs, vs, gw, gb) -> None:
    """The host: where the input ``v_pos`` is mostly zeros (MNIST), its half of ``gw`` over
    its nonzeros (``_sparse_rows.ht_times``), then the negative half added by a GEMM of
    K = B; else :func:`weight_gradient`. ``gb`` the same either way."""
    batch = v_pos.shape[0]
    if not ht_times(h_pos, v_pos, gw, -inv_b):
        weight_gradient(h_neg, v_neg, h_pos, v_pos, inv_b, hs, vs, gw, gb)
        return
    np.multiply(v_neg, inv_b, out=vs[:batch])
    np.multiply(v_pos, -inv_b, out=vs[batch:])
    gemm(h_neg.T, vs[:batch], gw, beta=1.0)
    vs.sum(axis=0, out=gb)


define_kernel(
    "rbm_weight_gradient",
    host=weight_gradient_host,
    cuda=weight_gradient,
    composite=True,
    doc="an RBM's CD weight and visible-bias gradients: one stacked GEMM (a GPU), or the "
    "input's half over its nonzeros where it is mostly zeros (the host)",
)


class RBMVisLayer(RBMLayer):
    type_names = ("kRBMVis",)
    placement = "device"
    num_srclayers = (1, 2)

    def setup(self, srcs):
        self.expect_srcs(srcs)
        self.read_conf()
        x = srcs[0].data
        if x is None or x.ndim < 2:
            raise self.error(
                f"layer '{self.name}' (kRBMVis) needs a [batch, features...] input as its "
                f"first source; '{srcs[0].name}' has shape {None if x is None else x.shape}",
                field="srclayers",
                help="give it a data layer (or another layer with data) as its first srclayers",
            )
        batch, vdim = int(x.shape[0]), int(np.prod(x.shape[1:]))
        self.vdim = vdim
        self.weight = self.create_param(0, (self.hdim, vdim), "weight")
        self.bias = self.create_param(1, (vdim,), "bias")
        self.alloc_blobs(batch, vdim)
        self._first_gibbs = True
        # backward's one GEMM: gW = [h_neg; h_pos]ᵀ · [v_neg; −v_pos] / B
        self._h_stack = self.xp.zeros((2 * batch, self.hdim), dtype=DTYPE)
        self._v_stack = self.xp.zeros((2 * batch, vdim), dtype=DTYPE)
        charge_memory(
            self,
            "scratch",
            (index_bytes(batch, vdim) + index_bytes(batch, self.hdim),),
            itemsize=1,
            what="the nonzeros of the input and of the hidden sample, listed for the "
            "sparse products",
            training_only=True,
        )
        self._error = self.xp.zeros((), dtype=np.float64)  # one batch's squared error
        self.hid_layer = srcs[1] if len(srcs) > 1 else None

    def hidden(self, srcs) -> RBMLayer:
        """The kRBMHid layer: the second source, else the one that linked itself."""
        hid = srcs[1] if len(srcs) > 1 and srcs[1] is not None else self.hid_layer
        if hid is None:
            raise self.error(
                f"layer '{self.name}' (kRBMVis) has no kRBMHid layer reading it",
                field="srclayers",
                help='add a `type: kRBMHid srclayers: "<this layer>"` layer',
            )
        return hid

    def forward(self, phase, srcs):
        if phase & kPositive:
            x = srcs[0].data
            self.pos_data[...] = x.reshape(x.shape[0], -1)
            self._first_gibbs = True
        if phase & kNegative:
            hid = self.hidden(srcs)
            h = hid.pos_sample if self._first_gibbs else hid.neg_sample
            self._first_gibbs = False
            # a binary sample is mostly zeros once the RBM has learnt (10-15% ones in RBM1)
            self.kernels.sparse_rows_times_w(h, self.weight.value, self.neg_data)
            self.kernels.bias_sigmoid_forward(self.neg_data, self.bias.value, self.neg_data)
            if phase & kTest:
                batch = self.pos_data.shape[0]
                diff = self._v_stack[:batch]  # scratch until backward
                np.subtract(self.pos_data, self.neg_data, out=diff)
                np.square(diff, out=diff)
                # added on the device, read when the metrics are shown (no read per step)
                sums = self.metric_sums(("Squared Error",))
                np.sum(diff, dtype=np.float64, out=self._error)
                np.multiply(self._error, 1.0 / batch, out=self._error)
                np.add(sums[:1], self._error, out=sums[:1])

    def flops(self, srcs):
        """Forward: the negative phase's ``h·W`` (counted dense: it runs over the sample's
        nonzeros where they are few); backward: the weight gradient, one product over the
        stacked negative and positive halves, and the bias gradient's sums."""
        batch = self.pos_data.shape[0]
        product = 2.0 * batch * self.hdim * self.vdim
        return product, 2 * product + 2.0 * batch * self.vdim

    def backward(self, phase, srcs):
        hid = self.hidden(srcs)
        inv_b = DTYPE(1.0 / self.pos_data.shape[0])
        self.kernels.rbm_weight_gradient(
            hid.neg_data, self.neg_data, hid.pos_data, self.pos_data, inv_b,
            self._h_stack, self._v_stack, self.weight.grad, self.bias.grad,
        )  # fmt: skip
