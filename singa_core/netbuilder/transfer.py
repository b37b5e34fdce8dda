"""The copies between devices that the net builder puts on edges crossing them.

A worker's layers compute on its device, except layers that always compute on the host
(``placement = "host"``: input layers reading stores, output layers writing files) and
layers whose class does not say it has a device path (``placement = None``: a plugin
written for numpy arrays runs on the CPU, with a note). Wherever a layer's source lives
on another device than the layer, :func:`transfer_for` puts a :class:`DeviceTransfer`
between them: forward copies the source's output (and labels) to the consumer's device,
backward copies the gradient back. In SINGA 0.3 the input layers' data reached a GPU
worker the same way (the blob's host copy, then ``mutable_gpu_data``).
"""

from __future__ import annotations

from singa_core.contracts.device import array_module, copy_into, is_host_array
from singa_core.contracts.layer import Layer, LayerContext
from singa_core.contracts.sequences import SequenceRun, stacked
from singa_core.schema import job_pb2


class DeviceTransfer(Layer):
    """Copies ``src``'s output to the consumer's device and the gradient back."""

    num_srclayers = (1, 1)
    placement = "device"
    deploy_role = "keep"

    def __init__(self, src, consumer: Layer, sequence=None) -> None:
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
            sequence=sequence,  # the copies of an unrolled edge share arenas (one copy each)
        )
        super().__init__(conf, ctx)
        self.src = src

    #: the numeric guard skips it: its values are its source's, checked there
    _guarded = False

    # Copies are made when a consumer first reads them in a step: a transfer feeding a
    # loss layer copies only the labels, one feeding a neuron layer only the data (one
    # host-to-device copy per input and step).
    @property
    def data(self):
        if self._stale_data:
            self._stale_data = False
            copy_into(self._data, self._now.data)
        elif self._run is not None and self._run.stale_data:
            self._run.fetch_data()
        return self._data

    @data.setter
    def data(self, value) -> None:
        self._data = value
        self._stale_data = False

    def setup(self, srcs):
        src = srcs[0]
        takes_grad = src.grad_for(self) is not None
        self.alloc(src.data.shape, grad=takes_grad)
        labels = src.labels()
        self.aux = None if labels is None else self.buffer("aux", labels.shape, labels.dtype)
        self._stale_labels = False

    _run: _TransferRun | None = None  # the run of an unrolled edge's copies, when used

    @classmethod
    def sequence_run(cls, copies, srcs):
        """The copies of an unrolled edge move their data (labels, gradients) in one copy
        each way for all time steps."""
        arena = copies[0].ctx.sequence.arena if copies[0].ctx.sequence else None
        if arena is None or any(len(s) != 1 for s in srcs):
            return None
        for i, c in enumerate(copies):
            slot = c.ctx.sequence
            if slot is None or slot.arena is not arena or slot.index != i:
                return None
            if arena.views.get("data", [None] * (i + 1))[i] is not c._data:
                return None
            if c.aux is not None and arena.views.get("aux", [None] * (i + 1))[i] is not c.aux:
                return None
        return _TransferRun(copies, [s[0] for s in srcs])

    def forward(self, phase, srcs):
        self._run = None
        self._now = srcs[0]
        self._stale_data = True
        self._stale_labels = self.aux is not None

    def backward(self, phase, srcs):
        buf = srcs[0].grad_for(self)
        if buf is not None and self.grad is not None:
            copy_into(buf, self.grad)

    def labels(self):
        if getattr(self, "_stale_labels", False):
            self._stale_labels = False
            copy_into(self.aux, self._now.labels())
        elif self._run is not None and self._run.stale_labels:
            self._run.fetch_labels()
        return self.aux

    def host_copy(self, what="data"):
        if what == "labels":
            value = self.src.labels()  # what labels() copies (the source is on the host)
        else:
            value = getattr(self, "_now", self.src).data  # what data copies
        return value if is_host_array(value) else None

    def to_onnx(self, g, inputs):
        return inputs[0]  # the same values on another device


class _TransferRun(SequenceRun):
    """One copy for the data of all time steps, made when a consumer first reads one
    copy's data in a step; the same for the labels."""

    def __init__(self, copies, srcs) -> None:
        super().__init__(copies)
        self.srcs = srcs
        self.arena = copies[0].ctx.sequence.arena
        self.stale_data = self.stale_labels = False

    def forward(self, phase: int) -> None:
        for copy, src in zip(self.layers, self.srcs, strict=True):
            copy._run, copy._now = self, src
            copy._stale_data = copy._stale_labels = False
        self.stale_data = True
        self.stale_labels = self.layers[0].aux is not None

    def fetch_data(self) -> None:
        self.stale_data = False
        whole = stacked(self.srcs, "data")  # the sources' own arena: no gathering
        if whole is None:
            whole = self._stack([s.data for s in self.srcs])
        copy_into(self.arena.buffers["data"], whole)

    def fetch_labels(self) -> None:
        self.stale_labels = False
        labels = [s.labels() for s in self.srcs]
        whole = stacked(self.srcs, "aux", labels)  # the sources' own arena: no gathering
        if whole is None:  # gathered on the host: a replayed step would not gather again
            whole = self._stack(labels)
        copy_into(self.arena.buffers["aux"], whole)

    @staticmethod
    def _stack(arrays):
        """The arrays as one (T, ...) array, stacked where they are (on the host: no
        launch; refused while a step is captured, as its replay would not stack again)."""
        from singa_core.contracts import capture

        mod = array_module(arrays[0])
        graph = capture.active()
        if graph is not None and mod.__name__ == "numpy":
            raise graph.refuse("stack", "gather host arrays into a new one to copy them")
        return mod.stack(arrays)

    def backward(self, phase: int) -> None:
        for copy, src in zip(self.layers, self.srcs, strict=True):
            buf = src.grad_for(copy)
            if buf is not None and copy.grad is not None:
                copy_into(buf, copy.grad)


def needs_transfer(src, consumer: Layer) -> bool:
    """Whether the edge ``src`` → ``consumer`` crosses devices."""
    data = getattr(src, "data", None)
    if data is None:
        return False
    return array_module(data) is not consumer.xp
