"""kSwish: y = x · sigmoid(βx), β from ``[acme.swish_conf] { beta }``; exports to ONNX."""

import numpy as np
from singa_core.layer import NeuronLayer

from acme import swish_pb2


class SwishLayer(NeuronLayer):
    def setup(self, srcs):
        self.expect_srcs(srcs)
        self.beta = float(self.conf.Extensions[swish_pb2.swish_conf].beta)
        self.alloc_like(srcs[0].data)

    def _sigmoid(self, x):
        return 1 / (1 + np.exp(-np.float32(self.beta) * x))

    def forward(self, phase, srcs):
        x = srcs[0].data
        np.multiply(x, self._sigmoid(x), out=self.data)

    def backward(self, phase, srcs):
        gx = srcs[0].grad_for(self)
        if gx is not None:  # d/dx x·s(βx) = s + βx·s·(1 − s)
            x = srcs[0].data
            s = self._sigmoid(x)
            np.multiply(self.grad, s + np.float32(self.beta) * x * s * (1 - s), out=gx)

    def to_onnx(self, g, inputs):
        beta = g.const(np.float32(self.beta), f"{self.name}/beta")
        s = g.add("Sigmoid", [g.add("Mul", [inputs[0], beta])])
        return g.add("Mul", [inputs[0], s], name=self.name)
