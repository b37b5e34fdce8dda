"""kDropout: inverted dropout (SINGA 0.3 §2.3, neuron_layer/dropout.cc).

Training (phase has ``kTrain``): ``mask = [u < 1 − p] / (1 − p)`` with ``u ~ U(0, 1)`` drawn
by ``Layer.draw`` (counter-based, on the layer's device), ``y = x·mask``; backward
``gx = g·mask``. Other phases: ``y = x`` (and ``gx = g`` should backward run after such a
forward). ``p = dropout_conf.dropout_ratio``
(default 0.5) must be in [0, 1).
"""

from __future__ import annotations

import numpy as np

from singa_core.layer import NeuronLayer, kTrain, zeros_laid_out_like
from singa_core.memory import charge as charge_memory
from singa_core.memory import charge_draws
from singa_core.param import DTYPE
from singa_core.sequences import RowIndependent


class DropoutLayer(RowIndependent, NeuronLayer):
    type_names = ("kDropout",)
    placement = "device"

    def setup(self, srcs):
        self.expect_srcs(srcs)
        ratio = float(self.conf.dropout_conf.dropout_ratio)
        if not 0.0 <= ratio < 1.0:
            raise self.error(
                f"layer '{self.name}': dropout_ratio must be in [0, 1), got {ratio}",
                field="dropout_conf.dropout_ratio",
                help="dropout_ratio is the probability of dropping a unit, e.g. 0.5",
            )
        self.ratio = ratio
        self._keep = DTYPE(1.0 - ratio)
        self._scale = DTYPE(1.0 / (1.0 - ratio))
        shape = srcs[0].data.shape
        self.alloc_like(srcs[0].data)
        # written by training forwards alone (a test pass copies its input through)
        charge_memory(self, "scratch", shape, what="mask", training_only=True)
        self.mask = zeros_laid_out_like(self.data, xp=self.xp)
        # uniform draws go into a contiguous buffer laid out like the data (the generator
        # fills contiguous arrays only); _u is that buffer seen in NCHW order
        perm = np.argsort([-s for s in self.data.strides], kind="stable")
        charge_memory(self, "scratch", shape, what="uniform draws", training_only=True)
        self._u_base = self.xp.empty([shape[i] for i in perm], dtype=DTYPE)
        self._u = self._u_base.transpose(tuple(int(i) for i in np.argsort(perm)))
        charge_draws(self)  # its draws: numba's compiler on the host
        charge_memory(self, "scratch", shape, itemsize=1, what="keep mask", training_only=True)
        self._keepmask = np.empty_like(self.data, dtype=bool)
        self._masked = False  # whether the last forward applied a mask

    def to_onnx(self, g, inputs):
        return inputs[0]  # predicting: the identity

    def forward(self, phase, srcs):
        x = srcs[0].data
        if phase & kTrain:
            self.draw(self._u_base)  # on the device, counter-based (Layer.draw)
            np.less(self._u, self._keep, out=self._keepmask)
            np.multiply(self._keepmask, self._scale, out=self.mask)
            np.multiply(x, self.mask, out=self.data)
            self._masked = True
        else:
            np.copyto(self.data, x)
            self._masked = False

    def backward(self, phase, srcs):
        buf = srcs[0].grad_for(self)
        if buf is None:
            return
        if self._masked:
            np.multiply(self.grad, self.mask, out=buf)
        else:
            np.copyto(buf, self.grad)
