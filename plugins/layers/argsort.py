"""kArgSort: indices of each row's top-k values (SINGA 0.3 §2.5, output_layer/argsort.cc).

The source is flattened to ``(B, D)``; ``data`` is ``[B, topk]`` (``topk = argsort_conf.topk``,
default 1, in ``[1, D]``) holding the column indices of the ``topk`` largest values in
descending order, as floats; of equal values the higher index comes first (0.3 sorts
``(value, index)`` pairs with ``std::greater``). An output layer: no gradient.
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


class ArgSortLayer(OutputLayer):
    type_names = ("kArgSort",)
    placement = "device"
    deploy_role = "keep"  # a net may predict the top-k class indices

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
                field="argsort_conf.topk",
                help=f"set topk between 1 and {self.dim}",
            )
        self.alloc((self.batchsize, self.topk), grad=False)

    def to_onnx(self, g, inputs):
        x = g.add("Flatten", inputs, name=f"{self.name}/flat", axis=1)
        k = g.const([self.topk], f"{self.name}/k", np.int64)
        _, idx = g.add("TopK", [x, k], name=self.name, outputs=2, axis=1, largest=1, sorted=1)
        return g.add("Cast", [idx], name=f"{self.name}/float", to=1)  # float32

    def forward(self, phase, srcs):
        x = srcs[0].data.reshape(self.batchsize, self.dim)
        self.data[...] = top_k_indices(x, self.topk)
