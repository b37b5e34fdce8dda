"""kSplit: feeds one source to several consumers (SINGA 0.3 §2.6, connection_layer/split.cc).

``data`` is the source's data array itself (no copy). There are
``split_conf.num_splits`` gradient buffers; each consumer gets its own, assigned in the
order of first access through :meth:`grad_for`. Backward writes their sum into the
source's gradient buffer. ``self.grad`` is the first buffer.
"""

from __future__ import annotations

import numpy as np

from singa_core.layer import Layer, NeuronLayer
from singa_core.param import DTYPE


class SplitLayer(NeuronLayer):
    type_names = ("kSplit",)
    placement = "device"
    one_to_many = True  # one gradient buffer per consumer: no split after a split

    def setup(self, srcs):
        self.expect_srcs(srcs)
        n = int(self.conf.split_conf.num_splits)
        if n <= 0:
            raise self.error(
                f"layer '{self.name}': split_conf.num_splits must be positive, got {n}",
                field="split_conf.num_splits",
                help="set num_splits to the number of consumers (at least 1)",
            )
        self.num_splits = n
        self.data = srcs[0].data
        self.grads = [self.xp.zeros(self.data.shape, dtype=DTYPE) for _ in range(n)]
        self.grad = self.grads[0]
        self._slot: dict[Layer, int] = {}  # consumer -> index into self.grads
        self._used: list[np.ndarray] = []

    def grad_for(self, consumer: Layer) -> np.ndarray | None:
        i = self._slot.get(consumer)
        if i is None:
            i = len(self._slot)
            if i >= self.num_splits:
                raise self.error(
                    f"layer '{self.name}' (kSplit) has num_splits {self.num_splits} but "
                    f"'{consumer.name}' is consumer number {i + 1}",
                    field="split_conf",
                    help="set split_conf.num_splits to the number of layers that take its output",
                )
            self._slot[consumer] = i
            self._used.append(self.grads[i])
        return self.grads[i]

    def to_onnx(self, g, inputs):
        return inputs[0]  # every consumer reads the same tensor

    def forward(self, phase, srcs):
        self.data = srcs[0].data  # the source's array (no copy)

    def backward(self, phase, srcs):
        buf = srcs[0].grad_for(self)
        if buf is None:
            return
        used = self._used
        if not used:
            buf.fill(0.0)
        elif len(used) == 1:
            np.copyto(buf, used[0])
        else:
            np.add(used[0], used[1], out=buf)
            for g in used[2:]:
                buf += g
