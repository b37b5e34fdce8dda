"""kSoftmaxLoss: softmax + cross-entropy (SINGA 0.3 §2.4, loss_layer/softmax.cc).

``srclayers = [logits, label provider]``; labels come from ``srcs[1].labels()``. With
``p = softmax(logits)`` row-wise (max-subtracted) over ``count/B`` classes:

* ``loss = scale·Σ_n −ln max(p[n, label_n], FLT_MIN) / B`` (``self.loss`` and metric "loss");
* ``accuracy = scale·#{n : label_n among the top-k of p[n]} / B`` (metric "accuracy"; 0.3
  also multiplies the accuracy by ``scale``). Ranking is by ``(p, class index)`` descending,
  as 0.3's ``partial_sort`` with ``std::greater<pair>``: of equal probabilities the higher
  class index ranks first;
* gradient to the logits: ``scale·(p − onehot(label))/B``, times 1/n for a replica of a
  layer partitioned on the batch across n workers (the gradient of the group's mean loss).

``self.data`` holds ``p`` (shape of the logits). A label outside ``[0, classes)`` is a
SingaError here (0.3 CHECK-fails on a negative label and reads out of bounds otherwise).
"""

from __future__ import annotations

import numpy as np
from singa_builtins.layers import CUDNN_ALIAS_NOTE

from singa_core.layer import LossLayer
from singa_core.memory import charge as charge_memory
from singa_core.param import DTYPE
from singa_core.schema import job_pb2

FLT_MIN = float(np.finfo(np.float32).tiny)  # 1.17549435e-38


class SoftmaxLossLayer(LossLayer):
    type_names = ("kSoftmaxLoss", "kCudnnSoftmaxLoss")
    placement = "device"
    alias_note = CUDNN_ALIAS_NOTE
    num_srclayers = (2, 2)
    deploy_role = "output"

    @classmethod
    def deploy_output(cls, conf):
        """Predicting: the class probabilities, a kSoftmax over the logits."""
        out = job_pb2.LayerProto(name=conf.name, type=job_pb2.kSoftmax)
        out.srclayers.append(conf.srclayers[0])
        return out

    def setup(self, srcs):
        self.expect_srcs(srcs)
        conf = self.conf.softmaxloss_conf
        src = srcs[0].data
        self.batchsize = int(src.shape[0])
        self.dim = int(src.size // self.batchsize)
        self.topk = int(conf.topk)
        self.scale = float(conf.scale)
        if not 1 <= self.topk <= self.dim:
            raise self.error(
                f"layer '{self.name}': softmaxloss_conf.topk must be in [1, {self.dim}] "
                f"(the number of classes), got {self.topk}",
                field="softmaxloss_conf.topk",
                help=f"set topk between 1 and {self.dim} (1: top-1 accuracy)",
            )
        self.expect_labels(srcs[1], self.batchsize)
        self.alloc(src.shape, grad=False)
        B, D = self.batchsize, self.dim
        self._prob = self.data.reshape(B, D)
        self._rowmax = self.xp.empty(B, dtype=DTYPE)
        self._rowsum = self.xp.empty(B, dtype=DTYPE)
        self._rowbase = self.xp.arange(B, dtype=np.int64) * D
        self._idx = self.xp.empty(B, dtype=np.int64)
        self._ptruth = self.xp.empty(B, dtype=DTYPE)
        self._pmax = self.xp.empty(B, dtype=DTYPE)
        self._hitrow = self.xp.empty(B, dtype=bool)
        self._cols = self.xp.arange(D, dtype=np.int64)
        charge_memory(self, "scratch", (3, B, D), itemsize=1, what="top-k comparison masks")
        self._above = self.xp.empty((B, D), dtype=bool)
        self._tie = self.xp.empty((B, D), dtype=bool)
        self._later = self.xp.empty((B, D), dtype=bool)
        self._gscale = DTYPE(self.scale * self.group_share() / B)

    def _labels(self, srcs) -> np.ndarray:
        labels = srcs[1].labels()
        if labels is None:
            raise self.error(
                f"layer '{self.name}': source '{srcs[1].name}' provides no labels",
                field="srclayers",
            )
        labels = labels[: self.batchsize]
        if labels.dtype.kind not in "iu":
            labels = labels.astype(np.int64)
        lo, hi = int(labels.min()), int(labels.max())
        if lo < 0 or hi >= self.dim:
            bad = lo if lo < 0 else hi
            raise self.error(
                f"layer '{self.name}': label {bad} is outside [0, {self.dim}) "
                f"(the layer has {self.dim} classes)",
                field="srclayers",
            )
        return labels

    def forward(self, phase, srcs):
        B = self.batchsize
        x = srcs[0].data.reshape(B, self.dim)
        prob = self._prob
        np.max(x, axis=1, out=self._rowmax)
        np.subtract(x, self._rowmax[:, None], out=prob)
        np.exp(prob, out=prob)
        np.sum(prob, axis=1, out=self._rowsum)
        prob /= self._rowsum[:, None]
        labels = self._labels(srcs)
        np.add(self._rowbase, labels, out=self._idx)
        pt = self._ptruth
        np.take(prob.reshape(-1), self._idx, out=pt)
        hit = self._hits(prob, pt, labels)
        np.maximum(pt, FLT_MIN, out=pt)
        np.log(pt, out=pt)
        loss = -float(pt.sum(dtype=np.float64)) * self.scale / B
        self.loss = loss
        self.add_metric("loss", loss)
        self.add_metric("accuracy", hit * self.scale / B)

    def _hits(self, prob, pt, labels) -> int:
        """#rows whose label ranks among the top-k by (p, class index) descending."""
        if self.topk == 1:
            pmax, tie = self._pmax, self._tie
            np.max(prob, axis=1, out=pmax)
            np.equal(prob, pmax[:, None], out=tie)
            if np.count_nonzero(tie) == self.batchsize:  # a single maximum in every row
                np.equal(pt, pmax, out=self._hitrow)
                return int(np.count_nonzero(self._hitrow))
        above, tie = self._above, self._tie
        np.greater(prob, pt[:, None], out=above)
        np.equal(prob, pt[:, None], out=tie)
        if np.count_nonzero(tie) > self.batchsize:  # equal probabilities besides the truth
            np.greater(self._cols, labels[:, None], out=self._later)
            np.logical_and(tie, self._later, out=tie)
            np.logical_or(above, tie, out=above)
        rank = np.count_nonzero(above, axis=1)
        return int(np.count_nonzero(rank < self.topk))

    def backward(self, phase, srcs):
        buf = srcs[0].grad_for(self)
        if buf is None:
            return
        if not buf.flags.c_contiguous:  # a strided view: compute, then assign
            tmp = self.xp.ascontiguousarray(buf)
            self._gradient(tmp)
            buf[...] = tmp
        else:
            self._gradient(buf)

    def _gradient(self, buf: np.ndarray) -> None:
        flat = buf.reshape(-1)
        np.copyto(buf.reshape(self.batchsize, self.dim), self._prob)
        flat[self._idx] -= 1.0
        flat *= self._gscale
