"""kLabel: the deprecated 0.1-style label parser layer (SINGA 0.3 §2.2,
input_layer/deprecated.cc).

``srclayers = [a kShardData layer]``. For the shard layer's current batch, ``data`` is
``[batch]`` holding each record's ``label`` as a float (as 0.3) and ``aux`` the same labels
as int32, so loss and accuracy layers can name this layer as their label source (0.1 loss
layers read the labels from this layer's data). No gradient.
"""

from __future__ import annotations

import numpy as np
from singa_builtins.layers._records import record_source

from singa_core.layer import InputLayer


class LabelLayer(InputLayer):
    type_names = ("kLabel",)
    placement = "host"  # reads records/files on the CPU; the net copies its output
    deploy_role = "drop"  # labels: not part of a prediction
    num_srclayers = (1, 1)

    def setup(self, srcs):
        src = record_source(self, srcs)
        self.batchsize = int(src.batchsize)
        self.alloc([self.batchsize], grad=False)
        self.aux = self.xp.zeros(self.batchsize, dtype=np.int32)

    def forward(self, phase, srcs):
        self.aux[...] = [rec.label for rec in srcs[0].records()]
        self.data[...] = self.aux
