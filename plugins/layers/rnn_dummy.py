"""kRNNDummy: a placeholder source for unrolled RNNs (SINGA 0.3 §2.6,
connection_layer/rnn_dummy.cc).

``rnn_dummy_conf {dynamic_srclayer, shape, integer, low, high}``:

* no source: forward fills ``data`` of ``shape`` with ``U(low, high)`` draws from the layer's
  ``ctx.rng`` (``low + (high − low)·u``), floored when ``integer`` is true; ``shape`` must be
  given and ``low != high`` (as 0.3);
* one source: ``data`` is the source's data array (a view, no copy), re-taken every forward
  (a worker may substitute the source); backward copies ``grad`` into ``src.grad_for(self)``.

``dynamic_srclayer`` (the layer a BPTT worker feeds in as the source at test steps > 0) is
kept as the attribute ``dynamic_srclayer`` (None if unset). **Deviation**: 0.3's backward
was not implemented; here the gradient passes through to the source.
"""

from __future__ import annotations

import numpy as np

from singa_core.layer import NeuronLayer, kDeploy
from singa_core.param import DTYPE


class RNNDummyLayer(NeuronLayer):
    type_names = ("kRNNDummy",)
    placement = "host"  # reads records/files on the CPU; the net copies its output
    num_srclayers = (0, 1)

    @staticmethod
    def deploy_role(conf):
        # without a source it stands for the next input (a sampling net's first character,
        # then the fed-back prediction): predicting feeds it
        return "keep" if conf.srclayers else "input"

    def setup(self, srcs):
        self.expect_srcs(srcs)
        conf = self.conf.rnn_dummy_conf
        self.dynamic_srclayer: str | None = conf.dynamic_srclayer or None
        self.integer = bool(conf.integer)
        self.low, self.high = float(conf.low), float(conf.high)
        if self.ctx.phase & kDeploy and not srcs:  # fed: rnn_dummy_conf.shape minus its batch
            shape = [int(s) for s in conf.shape] or [1]
            self._sample = tuple(shape[1:])
            self.alloc([int(self.ctx.batchsize), *self._sample], grad=False)
            return
        if srcs:
            self.data = srcs[0].data
            self.grad = np.zeros_like(self.data, dtype=DTYPE)
            return
        shape = [int(s) for s in conf.shape]
        if not shape or min(shape) <= 0:
            raise self.error(
                f"layer '{self.name}' (kRNNDummy) without a source needs a positive "
                f"rnn_dummy_conf.shape, got {shape}",
                field="rnn_dummy_conf.shape",
                help="add e.g. `rnn_dummy_conf { shape: 32 low: 0 high: 101 integer: true }`",
            )
        if self.low == self.high:
            raise self.error(
                f"layer '{self.name}' (kRNNDummy) without a source draws from U(low, high) "
                f"but rnn_dummy_conf.low and high are both {self.low:g}",
                field="rnn_dummy_conf",
                help="set rnn_dummy_conf.low below rnn_dummy_conf.high, or give the layer a source",
            )
        self.alloc(shape)
        self._scale = DTYPE(self.high - self.low)
        self._low = DTYPE(self.low)
        # float32 rounding can give high itself; keep draws below it (so floor < high)
        self._top = np.nextafter(DTYPE(self.high), DTYPE(self.low))

    def sample_shape(self):
        return self._sample

    def to_onnx(self, g, inputs):
        return inputs[0]  # fed (a sampling net's input) or its source's tensor: as it is

    def feed(self, values):
        np.copyto(self.data, values.reshape(self.data.shape))

    def forward(self, phase, srcs):
        if srcs:
            self.data = srcs[0].data  # the source's array (no copy)
            return
        y = self.data
        self.ctx.rng.random(dtype=DTYPE, out=y)
        y *= self._scale
        y += self._low
        if self.low < self.high:
            np.minimum(y, self._top, out=y)
        if self.integer:
            np.floor(y, out=y)

    def backward(self, phase, srcs):
        if srcs:
            buf = srcs[0].grad_for(self)
            if buf is not None:
                np.copyto(buf, self.grad)
