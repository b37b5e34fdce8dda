"""Which unrolled copies of a net run as one, and in what order (the contract of a unit is
:mod:`singa_core.contracts.sequences`'s).

* :func:`sequence_slots`: while a net is built, every copy ``i#L`` of a layer unrolled over
  ``T > 1`` steps gets a slot in one arena per (layer, partition), so its buffers are
  element ``i`` of arrays shared by the copies.
* :func:`plan_units`: the execution units of a built net, in an order that respects every
  edge: a wide instance of each row-independent layer (:class:`Steps` its sources,
  :class:`WideSlot` its arrays and Params, its ``draw`` the copies'), a run for
  each layer whose class offers one (``Layer.sequence_run``), the other layers one by one.
  A worker that handles unrolled nets (kBPTT) executes these units instead of the layers,
  each as ``unit.forward(phase, net.srclayers(unit))``. Where the units cannot be ordered
  (a later step's copy of one layer feeding an earlier step of another), the plan is the
  layers one by one.
"""

from __future__ import annotations

import heapq
import math
import os
from dataclasses import replace

import numpy as np

from singa_core.contracts import capture
from singa_core.contracts.device import array_module
from singa_core.contracts.errors import SingaError
from singa_core.contracts.layer import AbsorbsBias, DefersBias
from singa_core.contracts.names import split_unrolled_name
from singa_core.contracts.sequences import RowIndependent, SequenceArena, SequenceSlot, stacked

#: ``SINGA_SEQUENCE_RUNS=0`` runs every unrolled copy by itself (the reference path, and a
#: way to compare the two)
ENV_SWITCH = "SINGA_SEQUENCE_RUNS"


def sequence_slots(specs) -> dict[str, SequenceSlot]:
    """Layer name -> its slot, for the copies of every layer unrolled over more than one
    step (one arena per configured layer and partition)."""
    groups: dict[tuple[str, int], list[tuple[int, str]]] = {}
    for spec in specs:
        index, base = split_unrolled_name(spec.conf.name)
        if index is None:
            continue
        groups.setdefault((base, int(spec.conf.partition_id)), []).append((index, spec.conf.name))
    slots: dict[str, SequenceSlot] = {}
    for members in groups.values():
        if len(members) < 2 or sorted(i for i, _ in members) != list(range(len(members))):
            continue
        arena = SequenceArena(len(members))
        for index, name in members:
            slots[name] = SequenceSlot(arena, index)
    return slots


def transfer_slot(src, consumer, arenas: dict) -> SequenceSlot | None:
    """The slot of the device copy between copy ``i`` of an unrolled source and copy ``j``
    of an unrolled consumer, or None: one arena per pair of layers and shift ``j − i``, so
    that no two copies share an element (a consumer taking copies i and i − 1 of one
    source has two device copies of copy i, each with its own gradient)."""
    s = getattr(getattr(src, "ctx", None), "sequence", None)
    c = consumer.ctx.sequence
    if s is None or c is None:
        return None
    key = (id(s.arena), id(c.arena), c.index - s.index)
    arena = arenas.get(key)
    if arena is None:
        arena = arenas[key] = SequenceArena(s.arena.length)
    return SequenceSlot(arena, s.index)


_ON, _OFF = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def runs_enabled() -> bool:
    """Whether the unrolled copies of a layer run as one (``SINGA_SEQUENCE_RUNS``: on unless
    set to 0/false/no/off); any other value is refused, never taken as either."""
    value = os.environ.get(ENV_SWITCH, "1").strip().lower()
    if value in _ON or value == "":
        return True
    if value in _OFF:
        return False
    raise SingaError(
        f"{ENV_SWITCH}={os.environ[ENV_SWITCH]!r} is neither on nor off",
        where=ENV_SWITCH,
        help=f"set {ENV_SWITCH} to one of {', '.join(_ON)} (the copies of an unrolled layer "
        f"run as one, the default) or {', '.join(_OFF)} (each copy by itself), or unset it",
    )


def plan_units(net) -> list:
    """The net's layers as execution units (see the module doc): each a Layer, a wide
    Layer or a SequenceRun, in an order where every unit comes after the units its sources
    are in; a unit's sources are ``net.srclayers(unit)``."""
    layers = list(net.layers)
    if not runs_enabled():
        return layers
    groups: dict[int, list] = {}
    for layer in layers:
        slot = layer.ctx.sequence
        if slot is not None:
            groups.setdefault(id(slot.arena), []).append(layer)
    runs: dict[int, object] = {}  # arena -> its unit, or None: copy by copy
    units: list = []
    unit_of: dict[str, int] = {}  # layer name -> its unit
    first: list[int] = []  # each unit's first position in the net's order
    for k, layer in enumerate(layers):
        slot = layer.ctx.sequence
        if slot is not None:
            key = id(slot.arena)
            if key not in runs:
                copies = sorted(groups[key], key=lambda la: la.ctx.sequence.index)
                runs[key] = run = _unit_for(net, copies)
                if run is not None:
                    for c in copies:
                        unit_of[c.name] = len(units)
                    units.append(run)
                    first.append(k)
            if runs[key] is not None:
                continue
        unit_of[layer.name] = len(units)
        units.append(layer)
        first.append(k)
    if len(units) == len(layers):
        return layers
    order = _order(net, layers, units, unit_of, first)
    return layers if order is None else [units[k] for k in order]


class _No(Exception):
    """These copies run one by one."""


def _unit_for(net, copies):
    """One unit for ``copies`` (in time order), or None: they run one by one."""
    first = copies[0]
    cls = type(first)
    if len(copies) < 2 or any(type(c) is not cls for c in copies) or not _share_params(copies):
        return None
    srcs = [list(net.srclayers(c)) for c in copies]
    wide = issubclass(cls, RowIndependent)
    n = min(len(s) for s in srcs)
    if wide and (any(len(s) != n for s in srcs) or not first.shape):
        return None
    unit = None if wide else cls.sequence_run(copies, srcs)
    if not wide and unit is None:
        return None
    members = {id(c) for c in copies}
    try:
        steps = [
            Steps([s[k] for s in srcs], copies, first.shape[0] if wide else None)
            for k in range(n)
            if all(id(s[k]) not in members for s in srcs)
        ]
        if wide:
            unit = _wide(copies, steps)
    except _No:
        return None
    net._srcs[unit.name] = steps
    return unit


def _share_params(copies) -> bool:
    """Whether every copy's Params use copy 0's values and gradients (as an unrolled
    layer's do), so that a unit may read and add into copy 0's."""
    first = copies[0].params
    for c in copies:
        if len(c.params) != len(first) or any(
            p.value is not q.value or p.grad is not q.grad
            for p, q in zip(c.params, first, strict=True)
        ):
            return False
    return True


def _rows(whole, kind: str):
    """A ``(T, B, …)`` arena as ``(T·B, …)`` (a view), or _No."""
    if whole is None or not whole.flags.c_contiguous:
        raise _No(kind)
    return whole.reshape(-1, *whole.shape[2:])


class Steps:
    """The sources of ``T`` copies at one position as one source of their ``T·B`` rows:
    what a unit is handed (``net.srclayers(unit)``). ``data`` and the gradient buffer are
    the sources' arenas seen as ``(T·B, …)`` (data not in an arena is gathered when read);
    ``labels()`` and ``host_copy()`` the steps' in time order, ``B`` (``rows``) each. Reading
    ``data`` or ``labels()`` reads each source's own, so a device copy moves what it is
    read for."""

    def __init__(self, srcs, consumers, rows: int | None) -> None:
        self.srcs = list(srcs)
        self.rows = rows
        names = dict.fromkeys(s.name for s in self.srcs)
        self.name = "…".join([self.srcs[0].name, self.srcs[-1].name][: min(len(names), 2)])
        bufs = [s.grad_for(c) for s, c in zip(self.srcs, consumers, strict=True)]
        self._grad = None
        if any(b is not None for b in bufs):
            self._grad = _rows(stacked(self.srcs, "grad", bufs), "grad")
        self._data = False  # not looked up yet

    @property
    def data(self):
        arrays = [s.data for s in self.srcs]
        if self._data is False:
            whole = stacked(self.srcs, "data", arrays)
            self._data = None if whole is None else _rows(whole, "data")
        return _gather(arrays) if self._data is None else self._data

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)

    def grad_for(self, consumer):
        return self._grad

    def output_for(self, consumer):
        return self

    def labels(self):
        labels = [s.labels() for s in self.srcs]
        if any(la is None for la in labels):
            return None
        whole = stacked(self.srcs, "aux", labels)
        if whole is not None and whole.ndim == 2 and whole.shape[1] == self.rows:
            return whole.reshape(-1)
        return _gather([la[: self.rows] for la in labels])

    def host_copy(self, what: str = "data"):
        hosts = []
        for s in self.srcs:
            h = s.host_copy(what) if hasattr(s, "host_copy") else getattr(s, what, None)
            if not isinstance(h, np.ndarray):
                return None
            hosts.append(h[: self.rows] if what == "labels" else h)
        return np.concatenate(hosts)


def _gather(arrays):
    """The steps' arrays as one, rows in time order: a new array, so refused while a step is
    captured (its replay would not gather again; :mod:`singa_core.contracts.capture`)."""
    graph = capture.active()
    if graph is not None:
        raise graph.refuse("concatenate", "gather the time steps' arrays into a new one")
    return array_module(arrays[0]).concatenate(arrays)


class WideSlot:
    """What a wide layer allocates through (its ``ctx.sequence``): its copies' arenas, each
    seen as ``(T·B, …)``, and copy 0's Params (``create_param`` hands them out in order)."""

    def __init__(self, copies) -> None:
        self.copies = list(copies)
        self.arena = copies[0].ctx.sequence.arena
        self.params = copies[0].params
        self.handed: dict[str, object] = {}

    def alloc(self, kind: str, shape, dtype, device):
        buf = self.arena.buffers.get(kind)
        shape = tuple(int(s) for s in shape)
        if buf is None or buf.dtype != np.dtype(dtype) or buf.size != math.prod(shape):
            return None
        if not buf.flags.c_contiguous:
            return None
        view = self.handed[kind] = buf.reshape(shape)
        return view


def _draws_of(copies):
    """A wide layer's ``draw``: ``out``'s rows in ``T`` parts, part ``i`` filled by copy
    ``i``'s own ``draw`` (its key, the step, its draw's number), in time order: what the
    copies draw one by one."""
    steps = len(copies)

    def draw(out, method: str = "random") -> None:
        rows = out.shape[0] // steps
        if rows * steps != out.shape[0]:
            raise ValueError(f"a wide layer draws {steps} steps' rows, not {out.shape[0]}")
        for i, copy in enumerate(copies):
            copy.draw(out[i * rows : (i + 1) * rows], method)

    return draw


def _wide(copies, steps):
    """The wide instance of ``copies``' row-independent class (see the module doc of
    :mod:`singa_core.contracts.sequences`), or _No."""
    first = copies[0]
    slot = WideSlot(copies)
    wide = type(first)(first.conf, replace(first.ctx, sequence=slot))
    wide.name = f"{first.name}…{copies[-1].name}"
    wide.copies = copies
    wide.add_metric, wide.metric_sums = first.add_metric, first.metric_sums  # to copy 0
    wide.draw = _draws_of(copies)  # each copy's rows drawn as the copy would
    for mixin, attr in ((DefersBias, "deferred_bias"), (AbsorbsBias, "absorbed_bias")):
        if isinstance(first, mixin):  # the net's bias fusion, the same for every copy
            if len({getattr(c, attr) is None for c in copies}) != 1:
                raise _No(attr)
            setattr(wide, attr, getattr(first, attr))
    wide.setup(steps)
    for kind in ("data", "grad", "aux"):  # the wide arrays are the copies' arenas
        views = slot.arena.views.get(kind)
        mine = getattr(wide, kind)
        if views is None or any(v is None for v in views):
            if mine is not None:
                raise _No(kind)
        elif mine is not slot.handed.get(kind):
            raise _No(kind)
    if [id(p) for p in wide.params] != [id(p) for p in first.params]:
        raise _No("params")
    return wide


def _order(net, layers, units, unit_of, first) -> list[int] | None:
    """A topological order of the units (ties: the net's order), or None on a cycle."""
    deps: list[set[int]] = [set() for _ in units]
    for layer in layers:
        u = unit_of[layer.name]
        names = list(net.specs[layer.name].srcs)
        names += [getattr(src, "name", None) for src in net.srclayers(layer)]  # device copies
        for name in names:
            v = unit_of.get(name)
            if v is not None and v != u:
                deps[u].add(v)
    users: list[list[int]] = [[] for _ in units]
    waiting = [len(d) for d in deps]
    for u, d in enumerate(deps):
        for v in d:
            users[v].append(u)
    ready = [(first[u], u) for u in range(len(units)) if waiting[u] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, u = heapq.heappop(ready)
        order.append(u)
        for w in users[u]:
            waiting[w] -= 1
            if waiting[w] == 0:
                heapq.heappush(ready, (first[w], w))
    return order if len(order) == len(units) else None
