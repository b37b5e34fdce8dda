"""kRNNLabel: the next character as the label of each time step (SINGA 0.3 §2.2,
input_layer/rnn_label.cc).

One source, a kCharRNN layer (connected with ``kUnrollOneToAll``). Copy ``t`` of this layer
provides ``labels()[i] = int(source step t + 1)[i]``: the character that follows the input
of time step ``t`` in stream ``i``. No data blob, no gradient.
"""

from __future__ import annotations

import numpy as np

from singa_core.layer import InputLayer


class RNNLabelLayer(InputLayer):
    type_names = ("kRNNLabel",)
    placement = "host"  # reads records/files on the CPU; the net copies its output
    num_srclayers = (1, 1)

    def setup(self, srcs):
        self.expect_srcs(srcs)
        seq = getattr(srcs[0], "sequence", None)
        t = int(self.conf.unroll_index)
        if seq is None:
            raise self.error(
                f"layer '{self.name}' (kRNNLabel): source '{srcs[0].name}' holds no character "
                "sequence",
                field="srclayers",
                help="the source of a kRNNLabel layer is the kCharRNN input layer",
            )
        if t + 1 >= seq.shape[0]:
            raise self.error(
                f"layer '{self.name}' (time step {t}) needs step {t + 1} of "
                f"'{srcs[0].name}', which holds steps 0 … {seq.shape[0] - 1}",
                field="srclayers",
                help="char_rnn_conf.unroll_len must be at least the net's unroll_len",
            )
        self._next = seq[t + 1]
        self.aux = self.buffer("aux", (seq.shape[1],), np.int64)  # the copies' share one array
        self.alloc((seq.shape[1],), grad=False)

    def forward(self, phase, srcs):
        np.copyto(self.data, self._next)
        np.copyto(self.aux, self._next, casting="unsafe")
