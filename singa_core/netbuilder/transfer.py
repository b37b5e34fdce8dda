"""The copies between devices that the net builder puts on edges crossing them.

A worker's layers compute on its device, except layers that always compute on the host
(``placement = "host"``: input layers reading stores, output layers writing files) and
layers whose class does not say it has a device path (``placement = None``: a plugin
written for numpy arrays runs on the CPU, with a note). Wherever a layer's source lives
on another device than the layer, :func:`device_copy` puts a :class:`DeviceTransfer`
between them: forward copies the source's output (and labels) to the consumer's device,
backward copies the gradient back. In SINGA 0.3 the input layers' data reached a GPU
worker the same way (the blob's host copy, then ``mutable_gpu_data``).
"""

from __future__ import annotations

from singa_core.contracts.device import array_module, copy_into, is_host_array
from singa_core.contracts.layer import Layer, LayerContext
from singa_core.contracts.sequences import RowIndependent
from singa_core.schema import job_pb2


class DeviceTransfer(RowIndependent, Layer):
    """Copies its source's output to the consumer's device and the gradient back.

    What it moves is what its consumer reads of it (``data``, ``labels()``): the reads of
    the consumer's ``setup`` decide it when the net is built (a transfer feeding a loss
    layer moves the labels alone, one feeding a neuron layer the data alone: one copy per
    input and step), and ``forward`` makes those copies. A kind first read later is copied
    then and moved by every forward after. The copies of an unrolled edge run as one wide
    transfer (:mod:`singa_core.sequences`), which moves what any of them is read for."""

    num_srclayers = (1, 1)
    placement = "device"
    deploy_role = "keep"
    #: the numeric guard skips it: its values are its source's, checked there
    _guarded = False

    def setup(self, srcs):
        self.src = src = srcs[0]
        self._moves: set[str] = set()  # what forward copies: "data", "labels"
        # a wide transfer moves what its copies are read for
        self._copies = getattr(self.ctx.sequence, "copies", None) or [self]
        self.alloc(src.data.shape, grad=src.grad_for(self) is not None)
        labels = src.labels()
        self.aux = None if labels is None else self.buffer("aux", labels.shape, labels.dtype)

    @property
    def data(self):
        self._read("data")
        return self._data

    @data.setter
    def data(self, value) -> None:
        self._data = value

    @property
    def shape(self) -> tuple[int, ...]:  # no read: what a step moves stays as it is
        return () if self._data is None else tuple(self._data.shape)

    def labels(self):
        if self.aux is not None:
            self._read("labels")
        return self.aux

    def _read(self, kind: str) -> None:
        if kind not in getattr(self, "_moves", (kind,)):
            self._moves.add(kind)
            self._move(kind, self.src)

    def _move(self, kind: str, src) -> None:
        if kind == "data":
            copy_into(self._data, src.data)
        else:
            copy_into(self.aux, src.labels())

    def forward(self, phase, srcs):
        moves = set().union(*(c._moves for c in self._copies))
        for kind in sorted(moves):
            self._move(kind, srcs[0])

    def backward(self, phase, srcs):
        buf = srcs[0].grad_for(self)
        if buf is not None and self.grad is not None:
            copy_into(buf, self.grad)

    def host_copy(self, what="data"):
        # what forward copies: the source is on the host
        value = self.src.labels() if what == "labels" else self.src.data
        return value if is_host_array(value) else None

    def to_onnx(self, g, inputs):
        return inputs[0]  # the same values on another device


def device_copy(src, consumer: Layer, sequence=None) -> DeviceTransfer:
    """A DeviceTransfer from ``src`` to ``consumer``'s device (not yet set up);
    ``sequence``: its slot when the edge joins copies of unrolled layers (they share
    arenas, one copy each)."""
    conf = job_pb2.LayerProto(name=f"{src.name}>{consumer.device}", user_type="(device copy)")
    conf.partition_id = consumer.conf.partition_id
    conf.srclayers.append(src.name)
    ctx = LayerContext(
        rng=consumer.ctx.rng,
        locate=consumer.ctx.locate,
        phase=consumer.ctx.phase,
        partition_id=consumer.ctx.partition_id,
        num_partitions=consumer.ctx.num_partitions,
        device=consumer.device,
        sequence=sequence,
    )
    return DeviceTransfer(conf, ctx)


def needs_transfer(src, consumer: Layer) -> bool:
    """Whether the edge ``src`` → ``consumer`` crosses devices."""
    data = getattr(src, "data", None)
    if data is None:
        return False
    return array_module(data) is not consumer.xp
