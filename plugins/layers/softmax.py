"""kSoftmax (alias kCudnnSoftmax): row-wise softmax (SINGA 0.3 §2.3, neuron_layer/softmax.cc).

The source is flattened to ``(B, D)`` with ``D = src.count / B``; the output is ``(B, D)``:

* forward: ``y = exp(x − max_row x) / Σ_row exp(x − max_row x)``;
* backward: ``gx = y ⊙ (g − Σ_row g⊙y)``.

``softmax_conf.num_softmax_per_instance`` is ignored, as in 0.3. **Deviation**: 0.3's
backward is an empty TODO (the layer only worked in test/deploy nets); here it computes the
gradient above. kCudnnSoftmax is the same layer.
"""

from __future__ import annotations

import numpy as np

from singa_core.layer import NeuronLayer
from singa_core.param import DTYPE


class SoftmaxLayer(NeuronLayer):
    type_names = ("kSoftmax", "kCudnnSoftmax")
    placement = "device"
    needs_whole_source = True  # partitioned on dim 1, each part reads all of src

    def setup(self, srcs):
        self.expect_srcs(srcs)
        src = srcs[0].data
        if src is None or src.ndim == 0 or src.size == 0:
            raise self.error(
                f"layer '{self.name}': source '{srcs[0].name}' has no data",
                field="srclayers",
                help="give it a source layer that outputs data",
            )
        self.batchsize = int(src.shape[0])
        self.dim = int(src.size // self.batchsize)
        self.alloc((self.batchsize, self.dim))
        self._rowvec = self.xp.empty((self.batchsize, 1), dtype=DTYPE)
        self._tmp = np.empty_like(self.data)

    def to_onnx(self, g, inputs):
        x = g.add("Flatten", inputs, name=f"{self.name}/flat", axis=1)
        return g.add("Softmax", [x], name=self.name, axis=1)

    def forward(self, phase, srcs):
        x = srcs[0].data.reshape(self.batchsize, self.dim)
        y, r = self.data, self._rowvec
        np.max(x, axis=1, keepdims=True, out=r)
        np.subtract(x, r, out=y)
        np.exp(y, out=y)
        np.sum(y, axis=1, keepdims=True, out=r)
        y /= r

    def backward(self, phase, srcs):
        buf = srcs[0].grad_for(self)
        if buf is None:
            return
        y, r = self.data, self._rowvec
        gy = self._tmp
        np.multiply(self.grad, y, out=gy)
        np.sum(gy, axis=1, keepdims=True, out=r)
        if buf.flags.c_contiguous:
            out = buf.reshape(self.batchsize, self.dim)
            np.subtract(self.grad, r, out=out)
            out *= y
        else:  # a strided view: reshape would copy, so compute aside and assign
            np.subtract(self.grad, r, out=gy)
            gy *= y
            buf[...] = gy.reshape(buf.shape)
