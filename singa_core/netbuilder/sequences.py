"""Which unrolled copies of a net run as one, and in what order (see
:mod:`singa_core.contracts.sequences` for the contract of a run).

* :func:`sequence_slots`: while a net is built, every copy ``i#L`` of a layer unrolled over
  ``T > 1`` steps gets a slot in one arena per (layer, partition), so its buffers are
  element ``i`` of arrays shared by the copies.
* :func:`plan_units`: the execution units of a built net, in an order that respects every
  edge: a :class:`~singa_core.contracts.sequences.SequenceRun` for each layer whose class
  runs its copies together (``Layer.sequence_run``), the other layers one by one. A worker
  that handles unrolled nets (kBPTT) executes these units instead of the layers. Where the
  runs cannot be ordered (a later step's copy of one layer feeding an earlier step of
  another), the plan is the layers one by one.
"""

from __future__ import annotations

import heapq
import os

from singa_core.contracts.errors import SingaError
from singa_core.contracts.names import split_unrolled_name
from singa_core.contracts.sequences import SequenceArena, SequenceSlot

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
    """The net's layers as execution units (see the module doc): each a Layer or a
    SequenceRun, in an order where every unit comes after the units its sources are in."""
    layers = list(net.layers)
    if not runs_enabled():
        return layers
    groups: dict[int, list] = {}
    for layer in layers:
        slot = layer.ctx.sequence
        if slot is not None:
            groups.setdefault(id(slot.arena), []).append(layer)
    runs: dict[int, object] = {}  # arena -> its run, or None: copy by copy
    units: list = []
    unit_of: dict[str, int] = {}  # layer name -> its unit
    first: list[int] = []  # each unit's first position in the net's order
    for k, layer in enumerate(layers):
        slot = layer.ctx.sequence
        if slot is not None:
            key = id(slot.arena)
            if key not in runs:
                copies = sorted(groups[key], key=lambda la: la.ctx.sequence.index)
                runs[key] = run = _run_for(net, copies)
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


def _run_for(net, copies):
    if len(copies) < 2 or len({type(c) for c in copies}) != 1:
        return None
    return type(copies[0]).sequence_run(copies, [net.srclayers(c) for c in copies])


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
