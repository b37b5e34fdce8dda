"""Running all unrolled copies of one configured layer at once (public path
``singa_core.sequences``).

An unrolled net (:mod:`singa_core.netbuilder.unrolling`) holds ``T`` copies ``0#L … T−1#L``
of a layer ``L``. Run one by one, a step of char-rnn is 50 small products per weight and
50 loss layers; run together, the copies' input products are one GEMM over ``T·B`` rows,
their weight gradients a few, and the loss one kernel. The net stays as configured (the
copies, their names, Params, checkpoints and metrics are unchanged): only what a worker
executes differs (``net.units()``), and a copy's arrays hold what running it alone would.

**Arenas.** While the net is built every copy of an unrolled layer gets a
:class:`SequenceSlot`; :meth:`Layer.buffer <singa_core.contracts.layer.Layer.buffer>` (so
``alloc``/``alloc_like``) allocates through it, so copy ``i``'s ``data`` (``grad``, ``aux``)
is element ``i`` of one ``(T, …)`` array shared by the copies. :func:`stacked` returns that
array for the copies (or their consumers' view of them), ``None`` when the arrays are not
consecutive elements of one arena.

**Units.** :func:`singa_core.netbuilder.sequences.plan_units` turns the copies of a layer
into one unit when they share copy 0's Params and their sources are arenas:

* a class that mixes in :class:`RowIndependent` (output row ``r`` depends on row ``r`` of
  its sources alone: kInnerProduct, the activations, kSoftmaxLoss, kEmbedding, kDropout,
  the core's device copies) gets a *wide* instance of itself, built by the planner with the
  class's own constructor and ``setup``: its batch is ``T·B``; its sources stand for the
  copies' sources, each an arena seen as ``(T·B, …)`` (``data``, ``grad_for``,
  ``labels()``, ``host_copy()``); its ``data``/``grad``/``aux`` are the copies' arenas seen
  the same way; ``create_param`` hands it copy 0's Params (values and gradients); its
  :meth:`~singa_core.contracts.layer.Layer.draw` fills the rows of copy ``i`` by copy
  ``i``'s own ``draw``, in time order, so every copy draws what it would alone; its
  ``add_metric``/``metric_sums`` are copy 0's (one batch over ``T·B`` rows); a loss
  layer's :meth:`~singa_core.contracts.layer.LossLayer.group_share` counts the ``T``
  copies, so its gradient is that of the sum of their mean losses. Its own
  ``forward``/``backward`` are the run: a row-independent class writes no run code.
* any other class may return a :class:`SequenceRun` from the classmethod
  ``Layer.sequence_run(copies, srcs)`` (a layer with a recurrence: kGRU), or None.

Either is called like a layer, ``unit.forward(phase, srcs)`` and ``unit.backward(phase,
srcs)`` with ``srcs = net.srclayers(unit)``: for each source position every copy has, the
copies' sources there as one ``(T·B, …)`` source. The contract of a unit:

- ``forward`` leaves every copy's ``data`` (and labels) as the copies' ``forward`` calls in
  time order would;
- ``backward`` leaves every source gradient buffer as the copies' ``backward`` calls in
  reverse time order would, and *adds* into copy 0's Param gradients the sum over all
  ``T`` steps. That is what the copies do under ``kAggGrad``, the flag kBPTT (the one
  worker that runs units) passes to every backward, having zeroed the gradients once per
  step. Without ``kAggGrad`` a unit *writes* the whole sequence's gradient instead (the
  copies, each overwriting, would leave copy 0's share alone): a worker that does not
  accumulate runs ``net.layers``, not units. Buffers between copies of a recurrence (a
  GRU's gradient from the next step) need not be written;
- results agree with the copy-by-copy path within float32 rounding (sums over ``T·B`` rows
  are taken at once, in another order); ``SINGA_SEQUENCE_RUNS=0`` runs the copies one by
  one, the reference to compare with;
- metrics go to copy 0 as one batch over all time steps (the net averages the copies that
  reported, so a mean over ``T·B`` rows is the same figure).

A device copy between devices (:mod:`singa_core.netbuilder.transfer`) moves what its
consumer read while the net was built, in its own ``forward``: a unit reads its sources'
arrays without asking for them first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


class SequenceArena:
    """The ``(T, …)`` arrays holding one kind of buffer (``"data"``, ``"grad"``,
    ``"aux"``) of ``T`` copies; element ``i`` is copy ``i``'s."""

    def __init__(self, length: int) -> None:
        self.length = int(length)
        self.buffers: dict[str, Any] = {}  # kind -> the (T, ...) array
        self.views: dict[str, list] = {}  # kind -> the views handed to the copies

    def alloc(self, kind: str, index: int, shape: tuple[int, ...], dtype, device):
        """Copy ``index``'s buffer of ``kind``: a view of the arena's, made at copy 0 (or
        None when copy ``index`` asks for another shape or dtype than copy 0 did)."""
        buf = self.buffers.get(kind)
        if index == 0 or buf is None:
            if index != 0:
                return None
            buf = self.buffers[kind] = device.zeros((self.length, *shape), dtype=dtype)
            self.views[kind] = [None] * self.length
        if tuple(buf.shape[1:]) != tuple(shape) or buf.dtype != np.dtype(dtype):
            return None
        view = buf[index]
        self.views[kind][index] = view
        return view

    def adopt(self, kind: str, whole) -> list:
        """Make ``whole`` (an array of ``length`` rows a layer already holds, e.g. an input
        layer's time steps) the arena of ``kind``; returns the views to hand out as the
        copies' arrays (row ``i`` for copy ``i``)."""
        if len(whole) != self.length:
            raise ValueError(f"an arena of {self.length} steps cannot adopt {len(whole)} rows")
        self.buffers[kind] = whole
        self.views[kind] = [whole[i] for i in range(self.length)]
        return self.views[kind]


class SequenceSlot:
    """What an unrolled copy allocates through: its arena and its time step."""

    def __init__(self, arena: SequenceArena, index: int) -> None:
        self.arena = arena
        self.index = int(index)

    def alloc(self, kind: str, shape, dtype, device):
        return self.arena.alloc(kind, self.index, tuple(int(s) for s in shape), dtype, device)


def stacked(objs: Sequence[Any], kind: str = "data", arrays: Sequence[Any] | None = None):
    """The ``(T, …)`` arena array whose element ``i`` is ``getattr(objs[i], kind)`` (or
    ``arrays[i]``: e.g. the gradient buffers ``src.grad_for(consumer)``), when the objects
    are copies ``0 … T−1`` of one unrolled layer in order and each array is the one the
    copy's slot handed out for ``kind``; else None."""
    if not objs:
        return None
    slot = _slot_of(objs[0])
    if slot is None or slot.index != 0 or slot.arena.length != len(objs):
        return None
    arena = slot.arena
    views = arena.views.get(kind)
    if views is None:
        return None
    for i, obj in enumerate(objs):
        s = _slot_of(obj)
        if s is None or s.arena is not arena or s.index != i:
            return None
        if (getattr(obj, kind) if arrays is None else arrays[i]) is not views[i]:
            return None
    return arena.buffers[kind]


def _slot_of(obj) -> SequenceSlot | None:
    ctx = getattr(obj, "ctx", None)
    return getattr(ctx, "sequence", None)


class RowIndependent:
    """Mix into a layer class (``class MyLayer(RowIndependent, NeuronLayer)``) whose output
    row ``r`` depends on row ``r`` of its sources alone (and on its Params), so that its
    unrolled copies run as one wide instance of the class (the module doc says how, and
    what a unit guarantees). What the class promises for that: ``setup`` takes the batch
    from its sources' first axis and allocates through ``alloc``/``alloc_like``/``buffer``
    and ``create_param`` (Params in a fixed order); it reads of a source only ``data``,
    ``grad_for(self)``, ``labels()``, ``host_copy()``, ``name`` and ``shape``; Param
    gradients are sums over rows (added under ``kAggGrad``); random numbers come from
    ``self.draw(out)`` with the batch as ``out``'s first axis; metrics go through
    ``add_metric``/``metric_sums``; a loss scales its gradient by ``group_share()``."""


class SequenceRun:
    """All copies of one unrolled layer with a recurrence, run as one (see the module doc):
    called as a layer is, ``forward(phase, srcs)`` and ``backward(phase, srcs)`` with
    ``srcs`` the copies' sources as ``(T·B, …)`` sources. ``copies`` in time order;
    ``params`` are copy 0's, which every copy shares."""

    def __init__(self, copies: Sequence[Any]) -> None:
        self.copies = list(copies)
        self.name = f"{self.copies[0].name}…{self.copies[-1].name}"
        self.params = list(self.copies[0].params)

    def forward(self, phase: int, srcs: Sequence[Any]) -> None:
        raise NotImplementedError

    def backward(self, phase: int, srcs: Sequence[Any]) -> None:
        """Default: no gradient."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"
