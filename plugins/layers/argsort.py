"""kArgSort: indices of each row's top-k values (SINGA 0.3 §2.5, output_layer/argsort.cc).

The source is flattened to ``(B, D)``; ``data`` is ``[B, topk]`` (``topk = argsort_conf.topk``,
default 1, in ``[1, D]``) holding the column indices of the ``topk`` largest values in
descending order, as floats; of equal values the higher index comes first (0.3 sorts
``(value, index)`` pairs with ``std::greater``). An output layer: no gradient.
"""

from __future__ import annotations

from plugins.layers.accuracy import top_k_indices
from singa_core.layer import OutputLayer


class ArgSortLayer(OutputLayer):
    type_names = ("kArgSort",)

    def setup(self, srcs):
        self.expect_srcs(srcs)
        src = srcs[0].data
        self.batchsize = int(src.shape[0])
        self.dim = int(src.size // self.batchsize)
        self.topk = int(self.conf.argsort_conf.topk)
        if not 1 <= self.topk <= self.dim:
            raise self.error(
                f"layer '{self.name}': argsort_conf.topk must be in [1, {self.dim}] "
                f"(the values per instance), got {self.topk}",
                field="argsort_conf",
            )
        self.alloc((self.batchsize, self.topk), grad=False)

    def forward(self, phase, srcs):
        x = srcs[0].data.reshape(self.batchsize, self.dim)
        self.data[...] = top_k_indices(x, self.topk)
