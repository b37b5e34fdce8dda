"""Running all unrolled copies of one configured layer in one call (public path
``singa_core.sequences``).

An unrolled net (:mod:`singa_core.netbuilder.unrolling`) holds ``T`` copies ``0#L … T−1#L``
of a layer ``L``. Run one by one, a step of char-rnn is 50 small products per weight and
50 loss layers; run together, the copies' input products are one GEMM over ``T·B`` rows,
their weight gradients a few, and the loss one kernel. The net stays as configured (the
copies, their names, Params, checkpoints and metrics are unchanged): only how a worker
executes them differs, and a copy's arrays hold what running it alone would give.

Two pieces:

* **Arenas.** The net builder gives every copy of an unrolled layer a
  :class:`SequenceSlot`; :meth:`Layer.alloc <singa_core.contracts.layer.Layer.alloc>`
  allocates through it, so copy ``i``'s ``data`` (``grad``, ``aux``) is element ``i`` of one
  ``(T, …)`` array shared by the copies. :func:`stacked` returns that array for the copies
  (or their consumers' view of them), and ``None`` when the arrays are not consecutive
  elements of one arena (a copy of another shape, a source that is not unrolled).

* **Runs.** A layer class may implement the classmethod ``Layer.sequence_run(copies,
  srcs)``: given its copies in time order and each copy's sources (``net.srclayers``), it
  returns a :class:`SequenceRun`, or ``None`` when it cannot run these copies together
  (the worker then runs them one by one). The contract of a run:

  - ``forward(phase)`` leaves every copy's ``data`` (and labels) as the copies' own
    ``forward`` calls in time order would. It reads a source arena only after asking the
    first source copy for its array (:meth:`SequenceRun.fetch`): a device copy delivers
    all time steps then, in one copy;
  - ``backward(phase)`` leaves every Param gradient and every source gradient buffer
    (``src.grad_for(copy)``) as the copies' ``backward`` calls in reverse time order would,
    with the same phase flags (``kAggGrad``: added in place). Buffers between the copies
    (a recurrent layer's gradient from the next time step) need not be written;
  - results agree with the copy-by-copy path within float32 rounding (the sums are over
    ``T·B`` rows at once, in another order);
  - metrics go to ``copies[0]`` as one batch over all time steps (the net's metrics average
    the copies that reported, so a mean over ``T·B`` rows is the same figure).

  :func:`singa_core.netbuilder.sequences.plan_units` decides, per net, which runs are used
  and orders them with the remaining single layers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
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


@dataclass(frozen=True)
class RunArrays:
    """The arenas most runs read and write (see :func:`run_arrays`)."""

    x: Any  # the first sources' data
    y: Any  # the copies' data
    g: Any  # the copies' grad, or None (they have none)
    gx: Any  # the gradient buffers the first sources offer the copies, or None (none does)


def run_arrays(copies: Sequence[Any], srcs: Sequence[Sequence[Any]]) -> RunArrays | None:
    """The arenas of a run of ``copies`` over their first sources (``srcs[i][0]``), or None
    when one of them is not an arena, so that the class says no (copy by copy): the
    sources' data, the copies' data and grad (where they have one), and the buffers the
    sources' ``grad_for(copy)`` offer (where any does)."""
    first = copies[0]
    x = stacked([s[0] for s in srcs], "data")
    y = stacked(copies, "data")
    g = stacked(copies, "grad")
    if x is None or y is None or (g is None and first.grad is not None):
        return None
    bufs = [s[0].grad_for(c) for s, c in zip(srcs, copies, strict=True)]
    gx = None
    if any(b is not None for b in bufs):
        gx = stacked([s[0] for s in srcs], "grad", bufs)
        if gx is None:
            return None
    return RunArrays(x, y, g, gx)


def shares_params(copies: Sequence[Any]) -> bool:
    """Whether every copy's Params use copy 0's values and gradients (as an unrolled
    layer's do), so that a run may read and add into copy 0's."""
    first = copies[0].params
    for c in copies:
        if len(c.params) != len(first):
            return False
        for p, q in zip(c.params, first, strict=True):
            if p.value is not q.value or p.grad is not q.grad:
                return False
    return True


def _slot_of(obj) -> SequenceSlot | None:
    ctx = getattr(obj, "ctx", None)
    return getattr(ctx, "sequence", None)


class SequenceRun:
    """All copies of one unrolled layer run as one (see the module doc). Subclasses
    implement :meth:`forward` and, where gradients flow, :meth:`backward`."""

    def __init__(self, copies: Sequence[Any]) -> None:
        self.layers = list(copies)

    @property
    def name(self) -> str:
        return f"{self.layers[0].name}…{self.layers[-1].name}"

    @property
    def params(self) -> list:
        """The Params of every copy (what a worker collects and updates)."""
        return [p for layer in self.layers for p in layer.params]

    @staticmethod
    def fetch(srcs: Sequence[Any], kind: str = "data") -> None:
        """Ask the first of a run's source copies for its array ``kind`` (``"data"``, or
        ``"labels"``: its labels), so that sources that copy lazily (a device copy between
        unrolled layers) bring every time step's before the run reads their arena."""
        if kind == "labels":
            srcs[0].labels()
        else:
            getattr(srcs[0], kind)

    def forward(self, phase: int) -> None:
        raise NotImplementedError

    def backward(self, phase: int) -> None:
        """Default: no gradient (input layers)."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"
