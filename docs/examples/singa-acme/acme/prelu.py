"""kPReLU: y = max(x, 0) + alpha · min(x, 0), one learned alpha shared by all features; its
Param starts at ``[acme.prelu_conf] { init_alpha }`` unless job.conf's ``param`` says."""

import numpy as np
from singa_core.layer import NeuronLayer, kAggGrad
from singa_core.schema import job_pb2

from acme import prelu_pb2


class PReLULayer(NeuronLayer):
    placement = "device"

    def param_defaults(self, index, role):
        alpha = self.conf.Extensions[prelu_pb2.prelu_conf].init_alpha
        return job_pb2.ParamProto(init=job_pb2.ParamGenProto(type=job_pb2.kConstant, value=alpha))

    def setup(self, srcs):
        self.expect_srcs(srcs)
        self.alpha = self.create_param(0, (1,), "alpha")
        self.alloc_like(srcs[0].data)

    def forward(self, phase, srcs):
        x = srcs[0].data
        np.multiply(np.minimum(x, 0), self.alpha.value, out=self.data)
        self.data += np.maximum(x, 0)

    def backward(self, phase, srcs):
        x = srcs[0].data
        da = np.sum(self.grad * np.minimum(x, 0)).reshape(1)
        if phase & kAggGrad:
            self.alpha.grad += da
        else:
            self.alpha.grad[...] = da
        gx = srcs[0].grad_for(self)
        if gx is not None:
            np.multiply(self.grad, np.where(x < 0, self.alpha.value, 1), out=gx)
