"""kEuclideanLoss (SINGA 0.3 §2.4, loss_layer/euclidean.cc).

``srclayers = [prediction, target]`` (the target's ``data``; both must have the same
number of values). Reported loss (``self.loss``, metric "loss") ``Σ(t − p)²/B`` (no ½);
gradient to the prediction ``(p − t)/B`` (that of ``½‖p − t‖²/B``), none to the target.
"""

from __future__ import annotations

import numpy as np

from singa_core.layer import LossLayer
from singa_core.param import DTYPE


class EuclideanLossLayer(LossLayer):
    type_names = ("kEuclideanLoss",)
    placement = "device"
    num_srclayers = (2, 2)
    deploy_role = "output"

    @classmethod
    def deploy_output(cls, conf):
        return None  # predicting: the first source, the values the loss compares

    def setup(self, srcs):
        self.expect_srcs(srcs)
        pred, target = srcs[0].data, srcs[1].data
        if pred.size != target.size:
            raise self.error(
                f"layer '{self.name}': prediction '{srcs[0].name}' has {pred.size} values "
                f"{tuple(pred.shape)} but target '{srcs[1].name}' has {target.size} "
                f"{tuple(target.shape)}",
                field="srclayers",
                help="the prediction and the target need the same number of values: set the "
                "num_output of the prediction's layer to the target's size, or fix the "
                "target's shape",
            )
        self.batchsize = int(pred.shape[0])
        self._diff = self.xp.empty(pred.shape, dtype=DTYPE)  # p − t
        self._inv_b = DTYPE(self.group_share() / self.batchsize)
        self._squares = self.xp.zeros((), dtype=DTYPE)  # Σ(p − t)² of a batch
        self._loss = self.xp.zeros((), dtype=np.float64)  # the batch's loss

    def forward(self, phase, srcs):
        d = self._diff
        np.subtract(srcs[0].data, srcs[1].data.reshape(d.shape), out=d)
        flat = d.reshape(-1)
        # on the layer's device, read only when the metrics are shown (no read per step)
        np.dot(flat, flat, out=self._squares)
        np.multiply(self._squares, 1.0 / self.batchsize, out=self._loss)
        self.loss = self._loss
        sums = self.metric_sums(("loss",))
        np.add(sums[:1], self._loss, out=sums[:1])

    def backward(self, phase, srcs):
        buf = srcs[0].grad_for(self)
        if buf is not None:
            np.multiply(self._diff, self._inv_b, out=buf)
