import numpy as np
from singa_core import hookimpl
from singa_core.layer import NeuronLayer

from singa_scale import scale_pb2


class ScaleLayer(NeuronLayer):
    def setup(self, srcs):
        self.expect_srcs(srcs)
        self.alpha = np.float32(self.conf.Extensions[scale_pb2.scale_conf].alpha)
        self.alloc(srcs[0].shape)  # data and grad buffers

    def forward(self, phase, srcs):
        np.multiply(srcs[0].data, self.alpha, out=self.data)

    def backward(self, phase, srcs):
        g = srcs[0].grad_for(self)  # None when the source needs no gradient
        if g is not None:
            np.multiply(self.grad, self.alpha, out=g)


@hookimpl
def singa_register_layers(register):
    register("kScale", ScaleLayer)
