"""kOneHot: indices to one-hot rows (SINGA 0.3 §2.2, input_layer/onehot.cc).

``onehot_conf {vocab_size}``; one source holding ``B`` indices as floats (one per instance),
truncated to integers as 0.3's ``static_cast<int>``. ``data`` is ``[B, vocab_size]`` with
``data[i, idx_i] = 1`` and zeros elsewhere. An input layer: no gradient flows to the source
and consumers share ``data`` without a split. An index outside ``[0, vocab_size)`` is a
SingaError (0.3 wrote out of bounds).
"""

from __future__ import annotations

import numpy as np
from singa_builtins.layers.embedding import indices_onnx, read_indices

from singa_core.layer import InputLayer


class OneHotLayer(InputLayer):
    type_names = ("kOneHot",)
    placement = "host"  # reads records/files on the CPU; the net copies its output
    deploy_role = "keep"  # indices -> one-hot rows, the same when predicting
    num_srclayers = (1, 1)

    def setup(self, srcs):
        self.expect_srcs(srcs)
        self.vocab_size = int(self.conf.onehot_conf.vocab_size)
        if self.vocab_size <= 0:
            raise self.error(
                f"layer '{self.name}' (kOneHot) needs a positive onehot_conf.vocab_size, "
                f"got {self.vocab_size}",
                field="onehot_conf.vocab_size",
                help="add e.g. `onehot_conf { vocab_size: 101 }`",
            )
        src = srcs[0].data
        self.batchsize = int(src.shape[0]) if src.ndim else 0
        if self.batchsize == 0 or src.size != self.batchsize:
            raise self.error(
                f"layer '{self.name}' (kOneHot): source '{srcs[0].name}' must hold one index "
                f"per instance, but its data has shape {tuple(src.shape)}",
                field="srclayers",
                help="connect a source with one value per instance (e.g. a kLabel layer)",
            )
        self.alloc((self.batchsize, self.vocab_size), grad=False)
        self._idx = self.xp.empty(self.batchsize, dtype=np.int64)
        self._rows = self.xp.arange(self.batchsize)

    def to_onnx(self, g, inputs):
        idx = indices_onnx(g, inputs[0], self.name)
        eye = g.const(np.eye(self.vocab_size, dtype=np.float32), f"{self.name}/eye")
        return g.add("Gather", [eye, idx], name=self.name, axis=0)

    def forward(self, phase, srcs):
        idx = read_indices(self, srcs[0], self._idx, self.vocab_size, "onehot_conf")
        self.data.fill(0.0)
        self.data[self._rows, idx] = 1.0
