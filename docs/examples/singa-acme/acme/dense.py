"""kDense: y = x · Wᵀ without a bias, W (num_output, in) from ``innerproduct_conf``."""

import numpy as np
from singa_core.layer import NeuronLayer, kAggGrad


class DenseLayer(NeuronLayer):
    placement = "device"

    def setup(self, srcs):
        self.expect_srcs(srcs)
        batch, dim = srcs[0].shape
        out = self.conf.innerproduct_conf.num_output
        self.weight = self.create_param(0, (out, dim), "weight")
        self.alloc((batch, out))

    def forward(self, phase, srcs):
        np.matmul(srcs[0].data, self.weight.value.T, out=self.data)

    def backward(self, phase, srcs):
        x, g = srcs[0].data, self.grad
        gw = g.T @ x  # (out, in), like the weight
        if phase & kAggGrad:
            self.weight.grad += gw
        else:
            self.weight.grad[...] = gw
        gx = srcs[0].grad_for(self)  # None: the source takes no gradient
        if gx is not None:
            gx[...] = g @ self.weight.value  # source gradients are always overwritten
