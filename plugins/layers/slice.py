"""kSlice: cuts its source into equal parts, one per consumer (SINGA 0.3 §2.6,
connection_layer/slice.cc).

``slice_conf {slice_dim (default 0), num_slices (default 1)}``: the source's size along
``slice_dim`` must be divisible by ``num_slices``; part ``k`` is
``src.data[..., k·n:(k+1)·n, ...]`` (``n = size/num_slices`` on ``slice_dim``), a view of the
source's array (no copy; strided when ``slice_dim > 0``). Each consumer gets its own part
and gradient buffer, assigned in the order of first access through :meth:`data_for`,
:meth:`output_for` or :meth:`grad_for` (0.3's ``data(from)``/``mutable_grad(from)``).
Backward writes every part's gradient buffer into its place in ``src.grad_for(self)``
(parts nobody consumed contribute zeros). ``data``/``grad`` are part 0 (0.3's ``data_``).

Consumers read ``src.data``, which cannot depend on the reader, so the net hands each
consumer its part: :meth:`output_for` (``Layer.output_for``, called by the net when it
connects a consumer) returns a view object that behaves as a source layer whose
``data``/``grad_for`` are that consumer's part. A consumer that was handed the layer
itself (reading part 0) but asks :meth:`grad_for` for another part is an error.
"""

from __future__ import annotations

import numpy as np

from singa_core.layer import Layer, NeuronLayer, kDeploy
from singa_core.param import DTYPE


class SliceOutput:
    """Part ``index`` of a :class:`SliceLayer`, seen as a source layer by one consumer."""

    one_to_many = False
    is_loss = False

    def __init__(self, layer: SliceLayer, index: int) -> None:
        self.layer = layer
        self.index = index
        self.name = f"{layer.name}[{index}]"
        self.params: list = []

    @property
    def data(self) -> np.ndarray:
        return self.layer.datas[self.index]

    @property
    def grad(self) -> np.ndarray:
        return self.layer.grads[self.index]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)

    def grad_for(self, consumer) -> np.ndarray:
        return self.layer.grads[self.index]

    def labels(self) -> None:
        return None


class SliceLayer(NeuronLayer):
    type_names = ("kSlice",)
    placement = "device"
    one_to_many = True  # consumers attach directly (each to its own part), no kSplit

    def setup(self, srcs):
        self.expect_srcs(srcs)
        conf = self.conf.slice_conf
        dim, num = int(conf.slice_dim), int(conf.num_slices)
        src = srcs[0].data
        if not 0 <= dim < src.ndim:
            raise self.error(
                f"layer '{self.name}': slice_conf.slice_dim {dim} is not a dimension of "
                f"source '{srcs[0].name}' {tuple(src.shape)}",
                field="slice_conf",
                help="set slice_conf.slice_dim to a dimension of the source (0 is the batch)",
            )
        if num <= 0 or src.shape[dim] % num:
            raise self.error(
                f"layer '{self.name}': slice_conf.num_slices {num} does not divide the size "
                f"{src.shape[dim]} of dimension {dim} of source '{srcs[0].name}' "
                f"{tuple(src.shape)}",
                field="slice_conf",
                help="parts must be equal: choose num_slices dividing that size",
            )
        self.slice_dim, self.num_slices = dim, num
        n = src.shape[dim] // num
        lead = (slice(None),) * dim
        self._index = [lead + (slice(k * n, (k + 1) * n),) for k in range(num)]
        self._view(src)
        if self.ctx.phase & kDeploy:  # predicting: no gradients
            self.grads = [None] * num
        else:
            self.grads = [self.xp.zeros(self.datas[0].shape, dtype=DTYPE) for _ in range(num)]
        self.grad = self.grads[0]
        self._slot: dict[object, int] = {}  # consumer -> part index
        self._read: set[int] = set()  # parts whose consumer asked for its data

    def _view(self, src: np.ndarray) -> None:
        self._src_data = src
        self.datas = [src[i] for i in self._index]
        self.data = self.datas[0]

    # -- per-consumer access ----------------------------------------------------------
    def slot(self, consumer) -> int:
        """The part of ``consumer``, assigned in order of first access."""
        k = self._slot.get(consumer)
        if k is None:
            taken = set(self._slot.values())
            k = next((j for j in range(self.num_slices) if j not in taken), self.num_slices)
            if k >= self.num_slices:
                raise self.error(
                    f"layer '{self.name}' (kSlice) has num_slices {self.num_slices} but "
                    f"'{consumer.name}' is consumer number {k + 1}",
                    field="slice_conf",
                    help="set slice_conf.num_slices to the number of layers that take a part of it",
                )
            self._slot[consumer] = k
        return k

    def reserve_part(self, consumer: Layer, k: int) -> None:
        """Give ``consumer`` part ``k`` (the net does so for the slices it inserts between
        partitions: part j goes to partition j), instead of the next unassigned one."""
        if not 0 <= k < self.num_slices or k in self._slot.values():
            raise self.error(
                f"layer '{self.name}' (kSlice): part {k} cannot go to '{consumer.name}' "
                f"(num_slices {self.num_slices}, taken: {sorted(self._slot.values())})",
                field="slice_conf",
                help="each consumer takes its own part: set slice_conf.num_slices to one per "
                "consumer",
            )
        self._slot[consumer] = k

    def data_for(self, consumer: Layer) -> np.ndarray:
        k = self.slot(consumer)
        self._read.add(k)
        return self.datas[k]

    def output_for(self, consumer: Layer) -> SliceOutput:
        k = self.slot(consumer)
        self._read.add(k)
        return SliceOutput(self, k)

    def grad_for(self, consumer: Layer) -> np.ndarray:
        k = self.slot(consumer)
        if k > 0 and k not in self._read:
            raise self.error(
                f"layer '{self.name}' (kSlice): consumer '{consumer.name}' was given the "
                f"gradient buffer of part {k} but read part 0 (`data`)",
                help="connect consumers through SliceLayer.output_for (the net does)",
            )
        return self.grads[k]

    # -- the layer ------------------------------------------------------------------------
    def to_onnx(self, g, inputs):
        """One output per part, in part order (each consumer reads its own)."""
        size = self.datas[0].shape[self.slice_dim]
        sizes = g.const([size] * self.num_slices, f"{self.name}/sizes", np.int64)
        parts = g.add(
            "Split",
            [inputs[0], sizes],
            name=self.name,
            outputs=self.num_slices,
            axis=int(self.slice_dim),
        )
        return parts if self.num_slices > 1 else [parts]

    def forward(self, phase, srcs):
        src = srcs[0].data
        if src is not self._src_data:  # the source handed on a new array: new views
            self._view(src)

    def backward(self, phase, srcs):
        buf = srcs[0].grad_for(self)
        if buf is None:
            return
        for i, g in zip(self._index, self.grads, strict=True):
            np.copyto(buf[i], g)
