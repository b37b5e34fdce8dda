"""The Layer interface every layer plugin implements (SINGA 0.3 §2.1).

Data flows through float32 arrays of the layer's device (``self.device``, its array module
``self.xp``: numpy on the CPU, CuPy on a GPU; see :mod:`singa_core.contracts.device`) whose
first dimension is the batch. A layer allocates through :meth:`Layer.alloc` or ``self.xp``
and moves host data (records, random draws) with ``self.device.asarray``; numpy's
functions and ufuncs called on device arrays run on the device. A layer owns
``data`` (its output) and ``grad`` (the gradient of the loss w.r.t. ``data``, filled by its
consumers). In ``backward`` a layer computes its Params' gradients and writes the gradient
w.r.t. each source into ``src.grad_for(self)`` (overwriting, as SINGA does); sources that
return ``None`` take no gradient. Labels travel in ``aux`` (int array) of input layers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from singa_core.contracts import capture, draws
from singa_core.contracts.device import CPU, Device, array_module, default_device
from singa_core.contracts.errors import Location, SingaError
from singa_core.contracts.memory import charge as charge_memory
from singa_core.contracts.names import split_replica_name
from singa_core.contracts.param import DTYPE, Param
from singa_core.contracts.sequences import SequenceRun, SequenceSlot
from singa_core.schema import job_pb2

# Phase bit flags (SINGA's Phase enum); flags passed to forward/backward are OR-ed sets.
kTrain, kVal, kTest = job_pb2.kTrain, job_pb2.kVal, job_pb2.kTest
kPositive, kNegative = job_pb2.kPositive, job_pb2.kNegative
kForward, kBackward, kLoss = job_pb2.kForward, job_pb2.kBackward, job_pb2.kLoss
kDeploy, kAggGrad = job_pb2.kDeploy, job_pb2.kAggGrad


@dataclass
class LayerContext:
    """What the net gives a layer when constructing it."""

    rng: np.random.Generator
    locate: Callable[[str | None], Location | str | None] = lambda field=None: None
    get_plugin: Callable[[str, str], Any] | None = None  # (kind, name) -> registered object
    partition_id: int = 0
    num_partitions: int = 1
    phase: int = 0  # the phase of the net being built (kTrain, kVal, kTest); 0 if unknown
    # the deploy net (phase kDeploy, see singa_core.netbuilder.deploy): the batch size an
    # input layer sets up for, the per-sample shape of the raw input where the layer's conf
    # does not say it (0.1-style parser layers), and the trained values its Params use as
    # they are (keyed by Param name: a deploy net holds no copies and no gradients)
    batchsize: int = 0
    sample_shape: tuple[int, ...] | None = None
    param_values: Mapping[str, np.ndarray] | None = None
    # where the layer computes (its worker's device); the default is the device in effect
    # (the CPU unless inside singa_core.contracts.device.using_device)
    device: Device = field(default_factory=default_device)
    # an unrolled copy's slot in the arena its layer's copies allocate from
    # (singa_core.contracts.sequences); None for a layer that is not unrolled
    sequence: SequenceSlot | None = None


def zeros_laid_out_like(src, dtype=DTYPE, xp=None):
    """Zeros of ``src``'s shape laid out in memory like ``src`` (its axes in the order of
    their strides, as ``np.zeros_like`` keeps them), made by ``xp.zeros`` (``xp``: the array
    module of ``src``'s device, default numpy): on the host the kernel gives the memory pages
    only when they are first written, where ``np.zeros_like`` writes every byte at once (a
    test net's gradient, never written, then takes no memory)."""
    xp = np if xp is None else xp
    if src.flags.c_contiguous or src.ndim < 2:
        return xp.zeros(src.shape, dtype=dtype)
    order = sorted(range(src.ndim), key=lambda i: -abs(src.strides[i]))  # outermost first
    buf = xp.zeros(tuple(src.shape[i] for i in order), dtype=dtype)
    return buf.transpose(tuple(int(i) for i in np.argsort(order)))


class Layer:
    """Base class and contract of layer plugins.

    Subclasses override :meth:`setup`, :meth:`forward` and (unless they take no part in
    backpropagation) :meth:`backward`. Class attributes describe the layer to the net:

    * ``num_srclayers``: ``(min, max)`` number of source layers, ``max=None`` unbounded;
    * ``one_to_many``: consumers may read ``data`` directly without a split layer
      (SINGA's kOneToMany: input layers, GRU);
    * ``type_names``: the registered names (first canonical, the rest aliases) and
      ``alias_note``, a reason printed once per job when an alias is used;
    * ``needs_whole_source``: each output depends on every source value (0.3's
      kOneToAll src_neuron_connection: kInnerProduct, convolutions, kSoftmax); when such a
      layer is partitioned on dimension 1, every partition gets the whole source;
    * ``recurrent``: in an unrolled net copy ``i#L`` also takes ``(i−1)#L`` as its last
      source (kGRU). A recurrent layer without that source starts from its
      ``initial_state`` (zeros unless a worker carries a state over, see
      :meth:`carry_state`);
    * ``deploy_role``: the layer's part in the deploy net, the net singa predicts and
      exports with (:mod:`singa_core.netbuilder.deploy`): ``"keep"`` (it computes the
      prediction; forward runs with phase ``kDeploy``, i.e. not ``kTrain``), ``"drop"``
      (labels, metrics, file writers), ``"input"`` (fed raw samples through :meth:`feed`;
      its own sources are dropped), ``"output"`` (a loss: :meth:`deploy_output` says what
      stands for it), or ``None``: no deploy behaviour, an error naming the layer when a
      deploy net needs it. A type whose part depends on its configuration makes it a
      static method of the LayerProto (``deploy_role(conf) -> str``).
    """

    num_srclayers: tuple[int, int | None] = (1, 1)
    #: where the layer computes when its worker runs on a device other than the CPU:
    #: ``"device"`` (through ``self.xp``: its arrays live on the worker's device),
    #: ``"host"`` (always on the CPU: input layers reading stores, output layers writing
    #: files), or None (the class does not say, e.g. a plugin written for numpy arrays:
    #: it runs on the CPU and the job notes it once). The net builder copies data and
    #: gradients across every edge between devices (singa_core.netbuilder.transfer).
    placement: str | None = None
    # False: the numeric guard does not check this layer's output and gradient (the core's
    # device copies of another layer's arrays, checked there)
    _guarded: bool = True
    #: shown once per job when the layer is used under an alias (``type_names[1:]``)
    alias_note: str = ""
    one_to_many: bool = False
    recurrent: bool = False
    needs_whole_source: bool = False
    deploy_role: str | None = "keep"

    def __init__(self, conf, ctx: LayerContext | None = None) -> None:
        self.conf = conf  # singa.LayerProto
        self.name: str = conf.name
        ctx = ctx or LayerContext(rng=np.random.default_rng(0))
        # the device the worker asked for; a layer without a device path computes on the host
        self._requested_device: Device = ctx.device
        if self.placement != "device" and not ctx.device.is_host:
            ctx = replace(ctx, device=CPU)
        self.ctx = ctx
        self.params: list[Param] = []
        self.data: np.ndarray | None = None
        self.grad: np.ndarray | None = None
        self.aux: np.ndarray | None = None  # int labels of input layers
        self._metric_sum: dict[str, float] = {}
        self._metric_count: dict[str, int] = {}
        # metrics that stay on the device until read (see add_metric, metric_sums)
        self._metric_pending: dict[str, list] = {}
        self._metric_acc: tuple[tuple[str, ...], Any] | None = None
        self._draw_buffers: dict[tuple, np.ndarray] = {}  # see draw()
        self._draws = [-1, 0]  # [step, draws made in it] (see draw())
        self._draw_key: tuple | None = None  # (the generator, its two key words)

    # -- the deploy net (optional) -----------------------------------------------------
    def sample_shape(self) -> tuple[int, ...]:
        """``deploy_role = "input"``: the shape of one raw sample :meth:`feed` takes, as the
        layer reads it from a record (pixels 0-255 for images)."""
        raise NotImplementedError

    def feed(self, values: np.ndarray) -> None:
        """``deploy_role = "input"``: make ``data`` the batch ``values`` (float32, shape
        ``(ctx.batchsize, *sample_shape())``) after the layer's own preprocessing (mean,
        std, scale ...), exactly as ``forward`` would for the same records."""
        raise NotImplementedError

    @classmethod
    def deploy_output(cls, conf) -> job_pb2.LayerProto | None:
        """``deploy_role = "output"``: the layer that stands for this loss in the deploy
        net (same name, e.g. a kSoftmax over the loss's first source), or None when the
        loss's first source is itself the output (a Euclidean loss)."""
        raise NotImplementedError

    # -- the contract ---------------------------------------------------------------
    def setup(self, srcs: Sequence[Layer]) -> None:
        """Infer shapes from ``srcs``, allocate ``data``/``grad``, create Params."""
        raise NotImplementedError

    def forward(self, phase: int, srcs: Sequence[Layer]) -> None:
        raise NotImplementedError

    def backward(self, phase: int, srcs: Sequence[Layer]) -> None:
        """Default: no gradient (input and output layers)."""

    def grad_for(self, consumer: Layer) -> np.ndarray | None:
        """The buffer ``consumer`` writes d(loss)/d(self.data) into, or None."""
        return self.grad

    def output_for(self, consumer: Layer) -> Layer:
        """The source object ``consumer`` is handed (SINGA's ``data(from)``): the layer
        itself, or, for layers with one output per consumer (kSlice), an object standing
        for that consumer's part, with its own ``data``, ``grad_for`` and ``labels``."""
        return self

    def labels(self) -> np.ndarray | None:
        """Integer labels this layer provides to loss/accuracy layers (SINGA's aux_data)."""
        return self.aux

    def host_copy(self, what: str = "data") -> np.ndarray | None:
        """The host (numpy) copy of ``data`` (``what="data"``) or of :meth:`labels`
        (``"labels"``) where one exists, else None: a layer checks indices or labels there
        (their range) rather than reading them off a device. A layer whose arrays live on a
        device but came from the host (the net's device copies) says where."""
        value = self.labels() if what == "labels" else self.data
        return value if isinstance(value, np.ndarray) else None

    def state_dict(self) -> dict[str, Any]:
        """Resumable state besides Params (data cursors); JSON-serialisable values."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass

    def carry_state(self, last: Layer | None = None) -> None:
        """Recurrent layers: make ``last``'s output (default: this layer's own) the state
        the next forward starts from, when the layer has no previous-step source."""

    def reset_state(self) -> None:
        """Recurrent layers: start from the zero state again."""

    def close(self) -> None:
        """Publish what the layer has written (output layers' files). Called after every
        evaluation pass and at the end of a run; may be called again, and the layer may
        keep working (appending) afterwards."""

    @classmethod
    def sequence_run(
        cls, copies: Sequence[Layer], srcs: Sequence[Sequence[Layer]]
    ) -> SequenceRun | None:
        """Optional, for a layer with a recurrence: one unit running all unrolled copies
        (``copies`` in time order, ``srcs[i]`` copy i's sources), or None (the default):
        they run one by one. A row-independent layer needs none (``RowIndependent``); the
        contract is :mod:`singa_core.contracts.sequences`'s."""
        return None

    def flops(self, srcs: Sequence[Layer]) -> tuple[float, float] | None:
        """Optional: the floating-point operations of one ``forward`` and one ``backward``
        over the current batch, given the layer's sources (a multiply-add counts as two;
        the gradient for a source whose ``grad_for`` is None is not computed). ``singa
        time`` shows GFLOP/s from it; None (the default): the layer does not say."""
        return None

    @property
    def device(self) -> Device:
        """Where this layer computes (its worker's device)."""
        return self.ctx.device

    @property
    def xp(self):
        """The array module of this layer's device (numpy, CuPy or the stand-in): allocate
        with it (``self.xp.empty(...)``); numpy's functions called on its arrays dispatch
        to it."""
        return self.ctx.device.xp

    @property
    def kernels(self):
        """The named kernels of this layer's device (:mod:`singa_core.kernels`):
        ``self.kernels.NAME(...)`` runs NAME's implementation for the device."""
        return self.ctx.device.kernels

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape) if self.data is not None else ()

    def alloc(self, shape: Sequence[int], *, grad: bool = True) -> None:
        """Allocate ``data`` (and ``grad``) of ``shape`` (charged to the job's memory
        estimate first, see :mod:`singa_core.contracts.memory`)."""
        shape = tuple(int(s) for s in shape)
        grad = grad and not self.ctx.phase & kDeploy  # predicting computes no gradient
        charge_memory(self, "data", shape)
        if grad:
            charge_memory(self, "grad", shape)
        self.data = self.buffer("data", shape)
        self.grad = self.buffer("grad", shape) if grad else None

    def buffer(self, kind: str, shape: Sequence[int], dtype=DTYPE):
        """Zeros of ``shape`` on the layer's device for the buffer ``kind`` (``"data"``,
        ``"grad"``, ``"aux"``). An unrolled copy's come from its layer's arena (element
        ``unroll_index`` of one array for all copies, see
        :mod:`singa_core.contracts.sequences`), so the copies can run as one."""
        slot = self.ctx.sequence
        if slot is not None:
            view = slot.alloc(kind, shape, dtype, self.device)
            if view is not None:
                return view
        return self.device.zeros(tuple(int(s) for s in shape), dtype=dtype)

    def alloc_like(self, src: np.ndarray, *, grad: bool = True) -> None:
        """Allocate ``data`` (and ``grad``) shaped like ``src`` *and laid out like it in
        memory*. Convolution and pooling expose NCHW arrays that are strided views of a
        batch-innermost buffer; elementwise layers keep that layout so their ufuncs run over
        contiguous memory and hand the same layout on."""
        grad = grad and not self.ctx.phase & kDeploy
        charge_memory(self, "data", src.shape)
        if grad:
            charge_memory(self, "grad", src.shape)
        if array_module(src) is not self.xp:  # a source on another device
            self.alloc(src.shape, grad=grad)
            return
        if self.ctx.sequence is not None and (src.flags.c_contiguous or src.ndim < 2):
            # an unrolled copy: its element of the copies' arena (see :meth:`buffer`)
            self.data = self.buffer("data", src.shape)
            self.grad = self.buffer("grad", src.shape) if grad else None
            return
        self.data = zeros_laid_out_like(src, xp=self.xp)
        self.grad = zeros_laid_out_like(src, xp=self.xp) if grad else None

    def draw(self, out, method: str = "random") -> None:
        """Fill ``out`` (float32, on the layer's device) with random draws: ``"random"``
        U[0, 1), ``"standard_normal"`` N(0, 1). They come from a counter-based generator
        on the device itself (:mod:`singa_core.contracts.draws`): the layer's key, the
        step, the net's phase and the draw's number within the step, so every device
        draws the same numbers, a resumed run draws what the uninterrupted one did, and a
        replayed step draws anew."""
        step = capture.step_number(out)
        now = int(step.host[0])
        if self._draw_key is None or self._draw_key[0] is not self.ctx.rng:
            # a new generator (a re-seeded layer) starts its draws afresh
            self._draw_key = (self.ctx.rng, draws.layer_key(self.ctx.rng))
            self._draws = [-1, 0]
        if self._draws[0] != now:  # a new step: its draws are numbered from 0
            self._draws = [now, 0]
        number = self._draws[1]
        self._draws[1] += 1
        key0, key1 = self._draw_key[1]
        phase = int(self.ctx.phase)
        kernels = self.kernels
        if method == "random" and out.flags.c_contiguous:
            kernels.philox_uniform(out, key0, key1, number, phase, step.device)
            return
        size = int(out.size) + int(out.size) % 2
        u = self._draw_buffers.get(("u", size))
        if u is None:
            u = self._draw_buffers[("u", size)] = self.xp.empty(size, dtype=DTYPE)
        kernels.philox_uniform(u, key0, key1, number, phase, step.device)
        if method == "standard_normal":
            z = self._draw_buffers.get(("z", size))
            if z is None:
                z = self._draw_buffers[("z", size)] = self.xp.empty(size, dtype=DTYPE)
            draws.normal_from_uniform(u, z)
            u = z
        elif method != "random":
            raise ValueError(f"draw method {method!r}: 'random' or 'standard_normal'")
        out[...] = u[: out.size].reshape(out.shape)

    def param_defaults(self, index: int, role: str) -> job_pb2.ParamProto | None:
        """Defaults for this layer's Param ``index`` (its ``role``: "weight", "alpha" ...).

        The net builder creates a layer's Params through :meth:`create_param` while setting
        the layer up; that asks this hook first. Return ``None`` (the default: the user's
        ``param { }`` entry must say everything, including ``init``) or a ``ParamProto``
        holding what to use where the user's entry is silent: the user's ``init`` replaces
        the default ``init`` as a whole, any other field the user sets wins over the
        default's. A layer with defaults may have its ``param`` entries left out. Typical
        use: an initialiser from the layer's own conf, e.g. a PReLU's ``init_alpha``::

            def param_defaults(self, index, role):
                alpha = self.conf.Extensions[prelu_pb2.prelu_conf].init_alpha
                return ParamProto(init=ParamGenProto(type=kConstant, value=alpha))

        Called in ``setup`` (the conf, sources and ``self.ctx`` are available).
        """
        return None

    def create_param(self, index: int, shape: Sequence[int], role: str) -> Param:
        """Param number ``index`` of this layer's conf (``param { ... }`` entries), with
        the layer's :meth:`param_defaults` filled in where the entry is silent."""
        shared = getattr(self.ctx.sequence, "params", None)
        if shared is not None:  # a wide layer: copy 0's Params (singa_core.sequences)
            p = shared[len(self.params)]
            self.params.append(p)
            return p
        defaults = self.param_defaults(index, role)
        if defaults is not None and not isinstance(defaults, job_pb2.ParamProto):
            raise TypeError(
                f"{type(self).__name__}.param_defaults must return a ParamProto or None, "
                f"got {defaults!r}"
            )
        if index < len(self.conf.param):
            proto = self.conf.param[index]
        elif defaults is not None:
            proto = job_pb2.ParamProto()
        else:
            raise self.error(
                f"layer '{self.name}' needs a param entry for its {role} "
                f"(param #{index + 1}); it has {len(self.conf.param)}",
                field="param",
                help=f'add `param {{ name: "{self.name}_{role}" '
                f"init {{ type: kGaussian std: 0.01 }} }}`",
            )
        if defaults is not None:
            merged = job_pb2.ParamProto()
            merged.CopyFrom(defaults)
            if proto.HasField("init"):
                merged.ClearField("init")
            merged.MergeFrom(proto)
            proto = merged
        name = proto.name
        if not name:  # "ip1/weight"; replica i ≥ 1 of a partitioned layer: "ip1/weight@i"
            pid, base = split_replica_name(self.name)
            name = f"{base}/{role}" + (f"@{pid}" if pid else "")
        if self.ctx.phase & kDeploy:  # the trained values as they are, no gradient
            value = (self.ctx.param_values or {}).get(name)
            if value is not None and value.shape != tuple(shape) and value.size == math.prod(shape):
                value = value.reshape(shape)  # stored flat: a view, not a copy
            if value is not None and not self.device.is_host:
                value = self.device.asarray(value, dtype=DTYPE)
            p = Param(proto, tuple(shape), name, value=value, grad=False, device=self.device)
            self.params.append(p)
            return p
        charge_memory(self, "params", (2, *shape), what=f"param '{name}' (value and gradient)")
        p = Param(proto, tuple(shape), name, device=self.device)
        self.params.append(p)
        return p

    def error(self, message: str, *, field: str | None = None, help: str | None = None):
        """A SingaError pointing at this layer (or one of its fields) in job.conf."""
        return SingaError(message, where=self.ctx.locate(field), help=help)

    def expect_srcs(self, srcs: Sequence[Layer]) -> None:
        lo, hi = self.num_srclayers
        n = len(srcs)
        if n < lo or (hi is not None and n > hi):
            want = f"{lo}" if lo == hi else (f"at least {lo}" if hi is None else f"{lo} to {hi}")
            raise self.error(
                f"layer '{self.name}' ({type(self).__name__}) takes {want} source layer(s), "
                f"got {n}",
                field="srclayers",
                help='list the layer\'s inputs in srclayers (e.g. srclayers: "data"), one line '
                "each",
            )

    def expect_labels(self, src: Layer, batchsize: int) -> None:
        """Setup-time check that ``src`` provides ``batchsize`` labels (``labels()``)."""
        labels = src.labels()
        if labels is None:
            raise self.error(
                f"layer '{self.name}': its label source '{src.name}' provides no labels",
                field="srclayers",
                help="the second source of a loss/accuracy layer must be an input layer "
                "that reads labels (e.g. the data layer)",
            )
        if len(labels) < batchsize:
            raise self.error(
                f"layer '{self.name}': label source '{src.name}' provides {len(labels)} "
                f"labels for a batch of {batchsize}",
                field="srclayers",
                help="give the label source the batchsize of this layer's data",
            )

    def add_metric(self, name: str, value, count: int = 1) -> None:
        """Add one batch's ``value`` of metric ``name`` (``count`` batches' worth). A
        number is added at once; a 0-d device array stays on the device, unread, until the
        metrics are popped at a displayed step (one read for the whole net)."""
        if hasattr(value, "dtype") and not isinstance(value, np.ndarray | np.generic):
            pend = self._metric_pending.setdefault(name, [])
            pend.append(value)
            if len(pend) >= 64:  # fold, so that an undisplayed run keeps a short list
                pend[:] = [array_module(value).stack(pend).sum()]
        else:
            self._metric_sum[name] = self._metric_sum.get(name, 0.0) + float(value)
        self._metric_count[name] = self._metric_count.get(name, 0) + count

    def metric_sums(self, names: Sequence[str], count: int = 1):
        """A float64 array, one entry per name, on this layer's device, into which the
        layer's own kernel adds one batch's metric values (no read); each call counts
        ``count`` batches of them, so call it once per forward. Popping the metrics reads
        and zeroes it."""
        if self._metric_acc is None or self._metric_acc[0] != tuple(names):
            # sums restored from a checkpoint continue in the array, added in the same
            # order as in the run that was not interrupted
            start = np.array([self._metric_sum.pop(n, 0.0) for n in names], dtype=np.float64)
            self._metric_acc = (tuple(names), self.device.asarray(start))
        for name in names:
            self._metric_count[name] = self._metric_count.get(name, 0) + count
        return self._metric_acc[1]

    def pop_metrics(self) -> dict[str, float]:
        """Averages of the metrics added since the last call; resets them. A layer may
        override it (its own metric arithmetic); :func:`pop_metrics_of` calls it then."""
        return _pop_together([self], reset=True)[0]


# -- the metrics' bookkeeping the core does (checkpoints, the numeric guard) --------------------
def metric_state(layer: Layer) -> list[list]:
    """``[name, sum, count]`` of each metric since the last pop (device sums read):
    what a checkpoint keeps so that a resumed run displays the same averages."""
    sums = _pop_together([layer], reset=False)[0]
    return [[k, v, layer._metric_count.get(k, 0)] for k, v in sums.items()]


def load_metric_state(layer: Layer, state: list) -> None:
    """Restore :func:`metric_state` (as host sums)."""
    layer._metric_sum.clear()
    layer._metric_count.clear()
    layer._metric_pending.clear()
    for k, v, n in state:
        layer._metric_sum[k] = float(v)
        layer._metric_count[k] = int(n)
    if layer._metric_acc is not None:  # the restored sums continue in the array
        names = layer._metric_acc[0]
        layer._metric_acc = None
        start = np.array([layer._metric_sum.pop(n, 0.0) for n in names], dtype=np.float64)
        layer._metric_acc = (names, layer.device.asarray(start))


def metric_counts(layer: Layer) -> dict[str, int]:
    """How many batches of each metric were added since the last pop (a copy)."""
    return dict(layer._metric_count)


def add_metric_counts(layer: Layer, counts: dict[str, int]) -> None:
    """Count ``counts`` more batches of metrics whose values a replayed step added on the
    device (its Python, which counts them, ran only when the step was captured)."""
    for name, n in counts.items():
        layer._metric_count[name] = layer._metric_count.get(name, 0) + n


def host_metric_sums(layer: Layer) -> dict[str, float]:
    """The sums of the metrics added on the host since the last pop (not reset); a
    device's metrics are checked through its arrays instead (the numeric guard)."""
    return layer._metric_sum


def pop_metrics_of(layers: Sequence[Layer]) -> list[dict[str, float]]:
    """Every layer's metric averages since the last pop, resetting them, with one read
    per device of what the layers kept there (a displayed step's only synchronisation).
    A layer class that overrides :meth:`Layer.pop_metrics` is asked itself."""
    out: list = [None] * len(layers)
    plain = []
    for i, layer in enumerate(layers):
        if type(layer).pop_metrics is not Layer.pop_metrics:
            out[i] = layer.pop_metrics()
        else:
            plain.append(i)
    for i, metrics in zip(plain, _pop_together([layers[i] for i in plain], reset=True),
                          strict=True):  # fmt: skip
        out[i] = metrics
    return out


def _pop_together(layers: Sequence[Layer], *, reset: bool) -> list[dict[str, float]]:
    """The metrics of layers that keep them the base class's way; ``reset=False``: the
    sums instead of the averages, nothing reset."""
    groups: dict[int, tuple[Any, list]] = {}  # array module -> (module, [(i, name, value)])
    for i, layer in enumerate(layers):
        pending = list(layer._metric_pending.items())
        if layer._metric_acc is not None:
            names, acc = layer._metric_acc
            if any(layer._metric_count.get(n) for n in names):
                pending += [(n, [acc[k]]) for k, n in enumerate(names)]
        for name, values in pending:
            mod = array_module(values[0])
            total = values[0] if len(values) == 1 else mod.stack(values).sum()
            groups.setdefault(id(mod), (mod, []))[1].append((i, name, total))
    sums: list[dict[str, float]] = [dict(layer._metric_sum) for layer in layers]
    for mod, entries in groups.values():
        if mod is np:
            host = [float(v) for _, _, v in entries]
        else:
            stacked = mod.stack([mod.asarray(v, dtype=np.float64) for _, _, v in entries])
            host = stacked.get().tolist()  # the one read
        for (i, name, _), v in zip(entries, host, strict=True):
            sums[i][name] = sums[i].get(name, 0.0) + v
    if not reset:
        return sums
    out = []
    for layer, total in zip(layers, sums, strict=True):
        out.append({k: v / max(layer._metric_count.get(k, 0), 1) for k, v in total.items()})
        layer._metric_sum.clear()
        layer._metric_count.clear()
        layer._metric_pending.clear()
        if layer._metric_acc is not None:
            layer._metric_acc[1].fill(0)
    return out


class NeuronLayer(Layer):
    """A layer that transforms its source(s) and backpropagates."""


class InputLayer(Layer):
    """A source of data: no source layers, no gradient, feeds many consumers. In a deploy
    net it is fed raw samples (``deploy_role = "input"``) once it implements
    :meth:`~Layer.sample_shape` and :meth:`~Layer.feed`."""

    num_srclayers = (0, 0)
    one_to_many = True
    deploy_role = None

    def grad_for(self, consumer: Layer) -> np.ndarray | None:
        return None


class LossLayer(Layer):
    """Computes a loss; ``self.loss`` holds the last batch's value (scaled as reported).

    A replica of a loss layer partitioned on the batch across n workers reports the mean
    over its own instances but scales its gradient by :meth:`group_share` (1/n), so that the
    group's gradients *sum* to the gradient of the mean loss over the whole batch — what the
    servers need for data-parallel replicas and for the model-partitioned layers below,
    which see every replica's gradient."""

    #: the kit's gradient check takes ``loss`` as the objective of such a layer
    is_loss = True
    deploy_role = None  # a loss plugin says what stands for it (deploy_output)

    def __init__(self, conf, ctx: LayerContext | None = None) -> None:
        super().__init__(conf, ctx)
        self.loss: float = 0.0

    def group_share(self) -> float:
        """The factor of the gradient of this layer's mean loss: 1/n for a replica of n
        (above); ``T`` for a wide layer standing for ``T`` unrolled copies, whose objective
        is the sum of the copies' means (:mod:`singa_core.contracts.sequences`)."""
        share = float(len(getattr(self.ctx.sequence, "copies", ())) or 1)
        if self.conf.partition_dim == 0 and self.ctx.num_partitions > 1:
            return share / self.ctx.num_partitions
        return share

    def grad_for(self, consumer: Layer) -> np.ndarray | None:
        return None


class OutputLayer(Layer):
    """Consumes data (metrics, files); takes no part in backpropagation."""

    deploy_role = "drop"

    def grad_for(self, consumer: Layer) -> np.ndarray | None:
        return None


# -- bias fusion across an edge (decided once per net on a device by netbuilder/fusion.py) ------
class DefersBias:
    """A producer that can leave its bias to its only reader (kInnerProduct): mix it into
    the layer class (``class MyLayer(DefersBias, NeuronLayer)``). On a device, when its
    first reader absorbs biases (:class:`AbsorbsBias`) and nothing else reads it, the net
    builder sets ``deferred_bias`` to the Param :meth:`bias_to_defer` offers; the layer
    then skips its own add (``data`` holds the product without the bias until its reader
    adds it in place)."""

    deferred_bias: Param | None = None

    def bias_to_defer(self) -> Param | None:
        """The bias Param this layer would add to ``data`` as its last forward step, or
        None (it adds its own this time)."""
        return None


class AbsorbsBias:
    """A consumer that can add its first source's bias in its own first launch (the
    activations, the softmax loss): mix it into the layer class. When the net builder
    pairs it with a :class:`DefersBias` producer, ``absorbed_bias`` is that Param: the
    forward adds ``absorbed_bias.value`` (one value per column of ``srcs[0].data``) to
    ``srcs[0].data`` in place and computes from the sum, so that after it the source's
    ``data`` is what it would have been unfused. Backward is unchanged (the producer
    computes its bias gradient)."""

    absorbed_bias: Param | None = None


def partitioned_size(layer: Layer, value: int, what: str) -> int:
    """``value`` (e.g. num_output) divided among the partitions when ``layer`` is
    partitioned on dimension 1; a configuration error when it does not divide."""
    n = layer.ctx.num_partitions
    if layer.conf.partition_dim <= 0 or n <= 1:
        return value
    if value % n:
        raise layer.error(
            f"layer '{layer.name}' is partitioned on dimension 1 across {n} workers, but "
            f"its {what} ({value}) is not divisible by that",
            field="partition_dim",
            help=f"use a {what} divisible by {n}, or partition_dim: 0",
        )
    return value // n
