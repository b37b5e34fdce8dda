"""kAccuracy: top-k accuracy of scores against labels (SINGA 0.3 §2.5, output_layer/accuracy.cc).

``srclayers = [scores, label provider]``; ``topk = argsort_conf.topk`` (default 1). As in
0.3 it is a kArgSort layer that also counts hits: ``data`` is ``[B, topk]``, the indices
of each row's top-k scores in descending order (of equal scores the higher index first).
Each forward adds ``#{n : label_n among them}/B`` to the metric "accuracy".
"""

from __future__ import annotations

import numpy as np
from singa_builtins.layers.argsort import ArgSortLayer, top_k_indices


class AccuracyLayer(ArgSortLayer):
    type_names = ("kAccuracy",)
    placement = "device"
    num_srclayers = (2, 2)
    deploy_role = "drop"  # a metric: nothing to predict with

    def setup(self, srcs):
        super().setup(srcs)  # top-k of the scores (srcs[0])
        self.expect_labels(srcs[1], self.batchsize)

    def forward(self, phase, srcs):
        B, D, k = self.batchsize, self.dim, self.topk
        x = srcs[0].data.reshape(B, D)
        labels = srcs[1].labels()
        if labels is None:
            raise self.error(
                f"layer '{self.name}': source '{srcs[1].name}' provides no labels",
                field="srclayers",
                help="give kAccuracy a second source that provides labels (the data layer, or "
                "a kLabel layer)",
            )
        top = top_k_indices(x, k)
        self.data[...] = top
        hits = int(np.count_nonzero((top == labels[:B, None]).any(axis=1)))
        self.add_metric("accuracy", hits / B)
