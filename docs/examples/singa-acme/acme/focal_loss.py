"""kFocalLoss: softmax, then the focal loss −(1 − p_t)^γ · ln p_t (γ = 2) averaged over the
batch; predicts as a kSoftmax over its first source (the deploy net)."""

import numpy as np
from singa_core.layer import LossLayer
from singa_core.schema import job_pb2


class FocalLossLayer(LossLayer):
    deploy_role = "output"

    @classmethod
    def deploy_output(cls, conf):
        out = job_pb2.LayerProto(name=conf.name, type=job_pb2.kSoftmax)
        out.srclayers.append(conf.srclayers[0])
        return out

    num_srclayers = (2, 2)  # the logits, the label source
    gamma = 2.0

    def setup(self, srcs):
        self.expect_srcs(srcs)
        self.alloc(srcs[0].shape, grad=False)  # data: the probabilities

    def forward(self, phase, srcs):
        z = srcs[0].data.astype(np.float64)
        p = np.exp(z - z.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        self.data[...] = p
        rows = np.arange(len(p))
        self.pt = p[rows, np.asarray(srcs[1].labels())]
        self.loss = float(np.mean(-((1 - self.pt) ** self.gamma) * np.log(self.pt)))
        self.add_metric("loss", self.loss)

    def backward(self, phase, srcs):
        gz = srcs[0].grad_for(self)
        if gz is None:
            return
        p, pt, gamma = self.data.astype(np.float64), self.pt, self.gamma
        # dL/dp_t, then dp_t/dz_j = p_t (δ_jy − p_j)
        dpt = gamma * (1 - pt) ** (gamma - 1) * np.log(pt) - (1 - pt) ** gamma / pt
        onehot = np.zeros_like(p)
        onehot[np.arange(len(p)), np.asarray(srcs[1].labels())] = 1
        g = (dpt * pt)[:, None] * (onehot - p) / len(p)
        gz[...] = g * self.group_share()
