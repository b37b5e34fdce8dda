"""kConcate: concatenates its sources along one dimension (SINGA 0.3 §2.6,
connection_layer/concate.cc).

``concate_conf {concate_dim (default 0), num_concates (default 1)}``: ``num_concates`` must
equal the number of sources, ``concate_dim`` must be a dimension of the sources, and all
other dimensions must match. ``data = concatenate([s.data for s in srcs], concate_dim)``;
backward copies each source's part of ``grad`` into ``src.grad_for(self)`` (skipping sources
that take no gradient). Slice and concate are inverses.

**Deviation**: 0.3 copied in chunks sized by the *first* source, so sources of different
sizes along ``concate_dim`` were mixed up; here they concatenate correctly. 0.3 also
required at least two sources; one source is accepted here (a copy).
"""

from __future__ import annotations

import numpy as np

from singa_core.layer import NeuronLayer


class ConcateLayer(NeuronLayer):
    type_names = ("kConcate",)
    placement = "device"
    num_srclayers = (1, None)

    def setup(self, srcs):
        self.expect_srcs(srcs)
        conf = self.conf.concate_conf
        num, dim = int(conf.num_concates), int(conf.concate_dim)
        if num != len(srcs):
            raise self.error(
                f"layer '{self.name}': concate_conf.num_concates is {num} but the layer has "
                f"{len(srcs)} source layers",
                field="concate_conf",
                help=f"set `concate_conf {{ num_concates: {len(srcs)} }}`",
            )
        shape = list(srcs[0].data.shape)
        if not 0 <= dim < len(shape):
            raise self.error(
                f"layer '{self.name}': concate_conf.concate_dim {dim} is not a dimension of "
                f"its sources (they have {len(shape)})",
                field="concate_conf",
                help="set concate_conf.concate_dim to a dimension its sources have (0 is the "
                "batch)",
            )
        sizes = []
        for s in srcs:
            other = s.data.shape
            if len(other) != len(shape) or any(
                a != b for j, (a, b) in enumerate(zip(other, shape, strict=True)) if j != dim
            ):
                raise self.error(
                    f"layer '{self.name}': sources '{srcs[0].name}' {tuple(shape)} and "
                    f"'{s.name}' {tuple(other)} differ in a dimension other than "
                    f"concate_dim {dim}",
                    field="srclayers",
                    help="the sources must agree in every dimension but concate_dim: fix their "
                    "sizes, or concate_dim",
                )
            sizes.append(int(other[dim]))
        self.concate_dim = dim
        shape[dim] = sum(sizes)
        self.alloc(shape)
        # the part of data/grad belonging to each source (views)
        cuts = [int(c) for c in np.cumsum(sizes)[:-1]]  # host ints: any device's split
        self._data_parts = np.split(self.data, cuts, axis=dim)
        self._grad_parts = np.split(self.grad, cuts, axis=dim) if self.grad is not None else []

    def to_onnx(self, g, inputs):
        return g.add("Concat", inputs, name=self.name, axis=int(self.concate_dim))

    def forward(self, phase, srcs):
        for part, s in zip(self._data_parts, srcs, strict=True):
            np.copyto(part, s.data)

    def backward(self, phase, srcs):
        for part, s in zip(self._grad_parts, srcs, strict=True):
            buf = s.grad_for(self)
            if buf is not None:
                np.copyto(buf, part)
