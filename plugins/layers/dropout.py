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
from singa_core.param import DTYPE
from singa_core.sequences import SequenceRun, run_arrays


class DropoutLayer(NeuronLayer):
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

    @classmethod
    def sequence_run(cls, copies, srcs):
        """All unrolled copies at once: each copy draws its own numbers on the device, as
        it would alone, into one array; the mask and the products are one launch each for
        all steps."""
        first = copies[0]
        if any(len(s) != 1 for s in srcs) or any(c.ratio != first.ratio for c in copies):
            return None
        a = run_arrays(copies, srcs)
        if a is None or a.x.shape != a.y.shape:
            return None
        if not all(c._u_base.flags.c_contiguous for c in copies):
            return None
        return _DropoutRun(copies, srcs, a.x, a.y, a.g, a.gx)


class _DropoutRun(SequenceRun):
    def __init__(self, copies, srcs, x, y, g, gx) -> None:
        super().__init__(copies)
        first = copies[0]
        self.first, self.srcs = first, [s[0] for s in srcs]
        self.x, self.y, self.g, self.gx = x, y, g, gx
        xp = first.xp
        self.u = xp.empty(y.shape, dtype=DTYPE)  # every copy's draws
        self.keep = xp.empty(y.shape, dtype=bool)
        self.mask = xp.empty(y.shape, dtype=DTYPE)
        self.masked = False

    def forward(self, phase):
        first = self.first
        self.fetch(self.srcs)
        if phase & kTrain:
            for copy, u in zip(self.layers, self.u, strict=True):
                copy.draw(u)  # each copy's own numbers, as it draws them alone
            np.less(self.u, first._keep, out=self.keep)
            np.multiply(self.keep, first._scale, out=self.mask)
            np.multiply(self.x, self.mask, out=self.y)
            self.masked = True
        else:
            np.copyto(self.y, self.x)
            self.masked = False

    def backward(self, phase):
        if self.gx is None:
            return
        if self.masked:
            np.multiply(self.g, self.mask, out=self.gx)
        else:
            np.copyto(self.gx, self.g)
