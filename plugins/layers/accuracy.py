"""kAccuracy: top-k accuracy of scores against labels (SINGA 0.3 §2.5, output_layer/accuracy.cc).

``srclayers = [scores, label provider]``; ``topk = argsort_conf.topk`` (default 1). Like
0.3's ArgSortLayer, ``data`` is ``[B, topk]``: the indices of each row's top-k scores in
descending order (of equal scores the higher index first, as ``std::greater<pair>``).
Each forward adds ``#{n : label_n among them}/B`` to the metric "accuracy".
"""

from __future__ import annotations

import numpy as np

from singa_core.layer import OutputLayer


def top_k_indices(x: np.ndarray, k: int) -> np.ndarray:
    """Column indices of the ``k`` largest values of each row of ``x`` (``(B, D)``),
    descending; of equal values the higher index first (0.3's ``partial_sort`` with
    ``std::greater`` on ``(value, index)`` pairs). Returns an int array ``(B, k)``."""
    # a stable sort of the reversed row keeps the higher index first among equal values
    order = np.argsort(-x[:, ::-1], axis=1, kind="stable")[:, :k]
    return (x.shape[1] - 1) - order


class AccuracyLayer(OutputLayer):
    type_names = ("kAccuracy",)
    num_srclayers = (2, 2)

    def setup(self, srcs):
        self.expect_srcs(srcs)
        src = srcs[0].data
        self.batchsize = int(src.shape[0])
        self.dim = int(src.size // self.batchsize)
        self.topk = int(self.conf.argsort_conf.topk)
        if not 1 <= self.topk <= self.dim:
            raise self.error(
                f"layer '{self.name}': argsort_conf.topk must be in [1, {self.dim}] "
                f"(the number of classes), got {self.topk}",
                field="argsort_conf",
            )
        self.expect_labels(srcs[1], self.batchsize)
        self.alloc((self.batchsize, self.topk), grad=False)

    def forward(self, phase, srcs):
        B, D, k = self.batchsize, self.dim, self.topk
        x = srcs[0].data.reshape(B, D)
        labels = srcs[1].labels()
        if labels is None:
            raise self.error(
                f"layer '{self.name}': source '{srcs[1].name}' provides no labels",
                field="srclayers",
            )
        top = top_k_indices(x, k)
        self.data[...] = top
        hits = int(np.count_nonzero((top == labels[:B, None]).any(axis=1)))
        self.add_metric("accuracy", hits / B)
