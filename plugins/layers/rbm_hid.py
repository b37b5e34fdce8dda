"""kRBMHid: the hidden layer of an RBM (SINGA 0.3 §2.3 RBMHidLayer, §5.3 CD).

srclayers = [the kRBMVis layer] (set up, it links that layer to itself as ``hid_layer``);
``rbm_conf { hdim (required), gaussian (default false) }``.
Params: 0 ``weight`` W ``(hdim, vdim)`` (normally ``share_from`` the visible layer's weight),
1 ``bias`` b_h ``(hdim,)``. Phases (bit flags), with ``f = σ`` (identity if ``gaussian``):

* ``kPositive``: ``h_pos = f(v_pos·Wᵀ + b_h)``, ``pos_sample`` drawn from it; the product
  is the kernel ``sparse_rows_times_wt`` (over the input's nonzeros on the host where it
  is mostly zeros, as MNIST's pixels are: ``_sparse_rows``);
* ``kNegative``: ``h_neg = f(v_neg·Wᵀ + b_h)`` from the visible layer's reconstruction
  probabilities (not samples), ``neg_sample`` drawn from it.

Samples: binary units ``~ Bernoulli(prob)``; gaussian units ``prob + N(0, 1)``.
``neg_sample`` is drawn when it is first read after its negative phase (the visible layer's
next Gibbs step reads it), as 0.3 drew a sample when the visible layer asked for it: CD-1
reads no negative sample, so its steps draw none (100,000 draws and a compare a step in
RBM1). The numbers are those an eager draw would give: the layer's draws of a step are
numbered in the order it makes them, and only negative samples come after the positive
one, read in the order they were computed.
``backward`` (``kTrain``): ``gb_h = (Σ h_neg − Σ h_pos)/B``; the weight's gradient is 0 (the
visible layer computes the weight gradient of the shared tensor).

Deviation from 0.3: the positive sample is drawn in ``forward`` (0.3 drew it when the
visible layer asked for it); the same distribution, a different use of the random stream.
"""

from __future__ import annotations

import numpy as np
from singa_builtins.layers import _sparse_rows  # noqa: F401 - defines sparse_rows_times_wt
from singa_builtins.layers import sigmoid as _sigmoid  # noqa: F401 - defines its kernels
from singa_builtins.layers._rbm import RBMLayer

from singa_core.blas import gemm
from singa_core.layer import kNegative, kPositive
from singa_core.param import DTYPE


class RBMHidLayer(RBMLayer):
    type_names = ("kRBMHid",)
    placement = "device"
    num_srclayers = (1, 1)

    def setup(self, srcs):
        self.expect_srcs(srcs)
        self.read_conf()
        vis = srcs[0]
        if not hasattr(vis, "neg_data") or vis.data is None:
            raise self.error(
                f"layer '{self.name}' (kRBMHid) reads a kRBMVis layer; its source "
                f"'{vis.name}' is a {type(vis).__name__}",
                field="srclayers",
                help="set its srclayers to the kRBMVis layer it pairs with",
            )
        batch, vdim = vis.data.shape
        self.vdim = int(vdim)
        self.weight = self.create_param(0, (self.hdim, self.vdim), "weight")
        self.bias = self.create_param(1, (self.hdim,), "bias")
        self._neg_pending = False
        self.alloc_blobs(int(batch), self.hdim)
        self._pos_sum = self.xp.zeros(self.hdim, dtype=DTYPE)
        if getattr(vis, "hid_layer", None) is None:
            vis.hid_layer = self  # the visible layer may list only its input as source

    @property
    def neg_sample(self) -> np.ndarray:
        """The sample of the last negative phase, drawn on first read."""
        if self._neg_pending:
            self._neg_pending = False
            self.sample(self.neg_data, self._neg_sample, self.gaussian)
        return self._neg_sample

    @neg_sample.setter
    def neg_sample(self, buf: np.ndarray) -> None:
        self._neg_sample = buf

    def _hidden(self, v: np.ndarray, out: np.ndarray, data: bool = False) -> None:
        if data:  # the input batch, often mostly zeros (MNIST's pixels): kernel's choice
            self.kernels.sparse_rows_times_wt(v, self.weight.value, out)
        else:
            gemm(v, self.weight.value.T, out)
        if self.gaussian:
            out += self.bias.value
        else:  # the bias and σ in one pass (kernel bias_sigmoid_forward, kSigmoid's)
            self.kernels.bias_sigmoid_forward(out, self.bias.value, out)

    def forward(self, phase, srcs):
        vis = srcs[0]
        if phase & kPositive:
            self._neg_pending = False  # a new chain: an unread negative sample is not drawn
            self._hidden(vis.pos_data, self.pos_data, data=True)
            self.sample(self.pos_data, self.pos_sample, self.gaussian)
        if phase & kNegative:
            self._hidden(vis.neg_data, self.neg_data)
            self._neg_pending = True

    def flops(self, srcs):
        """Forward: a CD step runs it once per phase, ``v·Wᵀ`` for the data and for the
        reconstruction (counted dense: the data's product runs over its nonzeros where
        they are few); backward: the bias gradient's sums."""
        batch = self.pos_data.shape[0]
        return 2 * 2.0 * batch * self.vdim * self.hdim, 2.0 * batch * self.hdim

    def backward(self, phase, srcs):
        inv_b = DTYPE(1.0 / self.pos_data.shape[0])
        self.weight.zero_grad()  # the visible layer computes the shared weight's gradient
        # (Σ h_neg − Σ h_pos) / B, into buffers made once (nothing allocated per step)
        self.neg_data.sum(axis=0, out=self.bias.grad)
        self.pos_data.sum(axis=0, out=self._pos_sum)
        self.bias.grad -= self._pos_sum
        self.bias.grad *= inv_b
