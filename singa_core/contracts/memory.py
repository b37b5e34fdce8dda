"""Memory estimates of a job's nets, checked against the machine *before* allocating.

While :func:`singa_core.running.job.prepare_job` builds the nets it holds a :class:`MemoryEstimate`
active (:func:`estimating`). Every buffer a layer allocates through the Layer helpers
(``alloc``/``alloc_like``: its data and gradient buffers; ``create_param``: a Param's value
and gradient) and the updater state of every trained Param are charged to it from their
*shapes*, before numpy allocates anything. When the running total would exceed the memory
available, the charge raises a :class:`~singa_core.contracts.errors.SingaError` located at the layer
that asked for it, with the estimate, instead of numpy's ``MemoryError`` (or the kernel's
OOM killer, for a lazily committed ``np.zeros``).

The available memory is the least of ``MemAvailable`` of ``/proc/meminfo`` and the memory
this process's cgroup still allows (a container's or scheduler's limit minus its usage:
:func:`singa_core.contracts.resources.cgroup_memory`), or the environment variable
``SINGA_MEMORY_AVAILABLE`` (bytes, or with a K/M/G/T suffix: ``512M``) when set; on a system
without either, nothing is checked.

A layer that allocates work buffers of its own charges them with :func:`charge` as
``"scratch"`` (the convolutions' column buffers, padded inputs, pooling's argmax, an
activation's mask, the store pages an input layer's reader keeps mapped) and its buffers
outside the helpers as ``"data"``/``"grad"`` (the spatial layers' batch-innermost outputs).
Arrays of a few values (a batch of labels, per-row sums) are not in the estimate; a
``MemoryError`` they raise is still reported as a located error by the net. This is the
contract for layer plugins: charge before allocating.

**Only what is written takes memory.** A buffer that only a training pass writes — every
gradient, a backward pass's work buffers, what a training forward records for backward
(pooling's argmax) — is charged with ``training_only`` (the default for ``"grad"``). A net
that never trains (a test or validation net: its phase lacks kTrain) allocates such a
buffer on the host zeroed or uninitialised (``np.zeros``/``np.empty``: the kernel gives
memory pages only when they are first written) and never writes it, so it is kept apart
(:attr:`MemoryEstimate.unwritten`), out of the total, and the table says how much. Such a
buffer must not be written at set-up either (``np.zeros_like`` writes every byte;
:meth:`Layer.alloc_like` lays out zeros it does not touch). A GPU's allocator hands out
memory whether it is written or not: there every charge counts.

Memory a process takes once, however many layers need it (numba's JIT compiler, when
pooling runs the compiled kernels), is charged with :func:`charge_once`: a row of its own.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from singa_core.contracts.errors import SingaError
from singa_core.schema import job_pb2

ENV_AVAILABLE = "SINGA_MEMORY_AVAILABLE"
#: the device memory available to a job on a GPU (or the stand-in), when its own free
#: memory is misjudged (bytes, or with a K/M/G/T suffix)
ENV_DEVICE_AVAILABLE = "SINGA_DEVICE_MEMORY_AVAILABLE"

#: what a charge is for; the columns of ``singa train --dry-run``'s memory table
KINDS = ("data", "grad", "params", "updater", "scratch")

_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str) -> int:
    """``"1000"``, ``"64K"``, ``"512M"``, ``"2G"``, ``"1.5T"`` (binary units) in bytes."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgtKMGT]?)(?:i?[bB])?\s*", text)
    if not m:
        raise ValueError(f"not a size: {text!r}")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def format_bytes(n: int) -> str:
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def available_memory() -> tuple[int | None, str]:
    """(bytes available for a new job, where that number comes from); None if unknown."""
    env = os.environ.get(ENV_AVAILABLE)
    if env:
        try:
            return parse_size(env), f"${ENV_AVAILABLE}"
        except ValueError:
            raise SingaError(
                f"{ENV_AVAILABLE}={env!r} is not a size",
                where=f"${ENV_AVAILABLE}",
                help="give bytes, or a number with K, M, G or T (e.g. 512M), or unset it",
            ) from None
    return system_available_memory()


def system_available_memory(
    proc_root: str = "/proc", sys_root: str = "/sys/fs/cgroup"
) -> tuple[int | None, str]:
    """The least of ``MemAvailable`` and what this process's cgroup still allows (its
    limit minus its usage less reclaimable file cache, v1 or v2, the tightest over its
    ancestors), with the source."""
    from singa_core.contracts.resources import cgroup_memory

    best: tuple[int | None, str] = (None, "unknown")
    try:
        with open(os.path.join(proc_root, "meminfo")) as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    best = (int(line.split()[1]) * 1024, "MemAvailable in /proc/meminfo")
                    break
    except (OSError, ValueError, IndexError):
        pass
    cg = cgroup_memory(proc_root, sys_root)
    if cg is not None and (best[0] is None or cg.available < best[0]):
        best = (
            cg.available,
            f"the cgroup memory limit {format_bytes(cg.limit)} of {cg.source} minus "
            f"{format_bytes(cg.in_use)} in use"
            + (
                f" (its usage {format_bytes(cg.usage)} less {format_bytes(cg.reclaimable)} of "
                "reclaimable file cache)"
                if cg.reclaimable
                else ""
            ),
        )
    return best


def nbytes(shape: Sequence[int], itemsize: int = 4) -> int:
    """Bytes of an array of ``shape`` (exact Python integers: no overflow for huge shapes)."""
    return math.prod(int(s) for s in shape) * int(itemsize)


@dataclass
class LayerMemory:
    """The bytes one layer of one phase's net allocates, by kind (see :data:`KINDS`)."""

    phase: str
    layer: str
    bytes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))

    @property
    def total(self) -> int:
        return sum(self.bytes.values())


class MemoryEstimate:
    """A running estimate of a job's allocations, refused past ``limit`` bytes."""

    def __init__(self, limit: int | None, source: str = "", updater_slots: int = 0) -> None:
        self.limit = limit
        self.source = source
        self.updater_slots = updater_slots  # history arrays per trained Param (momentum...)
        self.rows: dict[tuple[str, str], LayerMemory] = {}
        self.total = 0
        # bytes of training-only buffers in nets that never train: allocated, never written
        self.unwritten = 0
        self.once: set[str] = set()  # keys charged by charge_once
        self.notes: list[str] = []  # what the rows charge_once made are, under the table
        # arrays on devices other than the host: bytes per device, and each device's free
        # memory when the estimate started (None: unknown), with its source
        self.device_totals: dict[str, int] = {}
        self.device_limits: dict[str, tuple[int | None, str]] = {}

    def device_limit(self, device) -> tuple[int | None, str]:
        name = str(device)
        if name not in self.device_limits:
            env = os.environ.get(ENV_DEVICE_AVAILABLE)
            if env:
                try:
                    self.device_limits[name] = (parse_size(env), f"${ENV_DEVICE_AVAILABLE}")
                except ValueError:
                    raise SingaError(
                        f"{ENV_DEVICE_AVAILABLE}={env!r} is not a size",
                        where=f"${ENV_DEVICE_AVAILABLE}",
                        help="give bytes, or a number with K, M, G or T (e.g. 40G), or unset it",
                    ) from None
            else:
                mem = device.memory()
                self.device_limits[name] = (
                    (mem[0], f"free on {name} when the job started") if mem else (None, "")
                )
        return self.device_limits[name]

    def charge_device(
        self, device, phase: str, layer: str, kind: str, n: int, *, where=None, what=""
    ) -> None:
        """Add ``n`` bytes of ``kind`` that ``layer`` allocates on ``device`` (a GPU); a
        located error past the device's free memory."""
        name = str(device)
        limit, source = self.device_limit(device)
        total = self.device_totals.get(name, 0)
        if limit is not None and total + n > limit:
            raise SingaError(
                f"not enough memory on {name}: layer '{layer}' ({phase} net) needs "
                f"{format_bytes(n)} for {what or kind}, bringing the job's estimate on "
                f"{name} to {format_bytes(total + n)}; {format_bytes(limit)} is available "
                f"({source})",
                where=where,
                notes=[f"the layers before it need {format_bytes(total)} there"] if total else [],
                help="reduce the batchsize or the layer's size, put fewer workers on this "
                "device (job.conf's gpu), or run on the CPU with --device cpu",
            )
        self.device_totals[name] = total + n
        row = self.rows.get((phase, layer))
        if row is None:
            row = self.rows[(phase, layer)] = LayerMemory(phase, layer)
        row.bytes[kind] += n

    def charge_once(self, phase: str, key: str, n: int, *, row: str, note: str, where=None):
        """:func:`charge_once` on this estimate: ``n`` bytes of scratch in a row ``(row)``
        the first time ``key`` is charged, nothing later; ``note`` goes under the table."""
        if n <= 0 or key in self.once:
            return
        self.once.add(key)
        label = f"({row})"
        self.charge(phase, label, "scratch", n, where=where, what=row)
        self.notes.append(f"{label}: {note}")

    def charge(self, phase: str, layer: str, kind: str, n: int, *, where=None, what="") -> None:
        """Add ``n`` bytes of ``kind`` for ``layer``; a located error past the limit."""
        if self.limit is not None and self.total + n > self.limit:
            raise SingaError(
                f"not enough memory: layer '{layer}' ({phase} net) needs "
                f"{format_bytes(n)} for {what or kind}, bringing the job's estimate to "
                f"{format_bytes(self.total + n)}; {format_bytes(self.limit)} is available "
                f"({self.source})",
                where=where,
                notes=[f"the layers before it need {format_bytes(self.total)}"]
                if self.total
                else [],
                help="reduce the batchsize or the layer's size (num_output, num_filters, "
                f"shape ...); set {ENV_AVAILABLE} (e.g. 8G) if the available memory is "
                "misjudged",
            )
        row = self.rows.get((phase, layer))
        if row is None:
            row = self.rows[(phase, layer)] = LayerMemory(phase, layer)
        row.bytes[kind] += n
        self.total += n

    def release(self, phase: str, layer: str, kind: str, n: int) -> None:
        """Take back ``n`` bytes charged as ``kind`` for ``layer``: arrays the net dropped
        once built (a test net's Params, whose values are the training net's: their own
        value is freed and their gradient never written, so neither stays in memory)."""
        row = self.rows.get((phase, layer))
        if row is None or n <= 0:
            return
        n = min(n, row.bytes[kind])
        row.bytes[kind] -= n
        self.total -= n

    def table(self) -> list[str]:
        """Per layer and kind, then the total and what is available (for --dry-run)."""
        lines = [
            "memory estimate (allocated at set-up and written while running; scratch: the "
            "work buffers layers declare, e.g. convolution columns, the store pages a reader "
            "keeps mapped, and the rows in parentheses):"
        ]
        w = max([len(f"{r.phase} {r.layer}") for r in self.rows.values()] + [5])
        lines.append(
            f"  {'layer':<{w}}  " + "  ".join(f"{k:>10}" for k in KINDS) + f"  {'total':>10}"
        )
        for r in self.rows.values():
            cells = "  ".join(f"{format_bytes(r.bytes[k]):>10}" for k in KINDS)
            lines.append(f"  {f'{r.phase} {r.layer}':<{w}}  {cells}  {format_bytes(r.total):>10}")
        sums = "  ".join(
            f"{format_bytes(sum(r.bytes[k] for r in self.rows.values())):>10}" for k in KINDS
        )
        lines.append(f"  {'total':<{w}}  {sums}  {format_bytes(self.total):>10}")
        avail = (
            f"{format_bytes(self.limit)} available ({self.source})"
            if self.limit is not None
            else "available memory unknown"
        )
        lines.append(f"  total {format_bytes(self.total)} ({self.total:,} bytes); {avail}")
        lines.extend(f"  {note}" for note in self.notes)
        if self.unwritten:
            lines.append(
                f"  not in the total: {format_bytes(self.unwritten)} of gradients and other "
                "training-only buffers of the nets that never train (test, validation), "
                "allocated but never written, so never given memory"
            )
        for name, n in self.device_totals.items():
            limit, source = self.device_limits.get(name, (None, ""))
            free = (
                f"{format_bytes(limit)} available ({source})"
                if limit is not None
                else "its free memory unknown"
            )
            lines.append(
                f"  on {name} (not in the total above): {format_bytes(n)} ({n:,} bytes); {free}"
            )
        return lines


_active: ContextVar[tuple[MemoryEstimate, str] | None] = ContextVar("singa_memory", default=None)


@contextmanager
def estimating(estimate: MemoryEstimate | None, phase: str) -> Iterator[None]:
    """Charge the allocations of the net of ``phase`` built inside the block to ``estimate``
    (None: charge nothing)."""
    token = _active.set((estimate, phase) if estimate is not None else None)
    try:
        yield
    finally:
        _active.reset(token)


def never_trains(layer) -> bool:
    """Whether ``layer`` is in a net that never runs a training pass (a test or validation
    net); False where its phase is unknown (0: a layer built outside a net)."""
    phase = int(getattr(getattr(layer, "ctx", None), "phase", 0) or 0)
    return bool(phase) and not phase & job_pb2.kTrain


def charge(
    layer,
    kind: str,
    shape: Sequence[int],
    *,
    itemsize: int = 4,
    what: str = "",
    training_only: bool | None = None,
) -> None:
    """Charge an array of ``shape`` (elements of ``itemsize`` bytes) that ``layer`` is about
    to allocate to the active estimate (nothing when none is active); located at the
    layer's config. ``training_only`` (default: ``kind == "grad"``): only a training pass
    writes it, so in a net that never trains it is counted apart, as never written (see the
    module docstring)."""
    active = _active.get()
    if active is None:
        return
    estimate, phase = active
    if kind == "updater":  # one history array per state the updater keeps (momentum...)
        if not estimate.updater_slots:
            return
        shape = (estimate.updater_slots, *shape)
    n = nbytes(shape, itemsize)
    dims = "x".join(str(int(s)) for s in shape) or "scalar"
    dims += " float32" if itemsize == 4 else f" of {itemsize} byte{'s' * (itemsize > 1)}"
    device = getattr(getattr(layer, "ctx", None), "device", None)
    if device is not None and not device.is_host:  # a GPU's memory, not the host's: its
        # allocator hands out memory whether it is written or not, so all of it is charged
        estimate.charge_device(
            device,
            phase,
            layer.name,
            kind,
            n,
            where=layer.ctx.locate(None),
            what=f"{what or kind} ({dims})",
        )
        return
    if (kind == "grad" if training_only is None else training_only) and never_trains(layer):
        estimate.unwritten += n  # allocated on the host, never written: no memory pages
        return
    estimate.charge(
        phase, layer.name, kind, n, where=layer.ctx.locate(None), what=f"{what or kind} ({dims})"
    )


#: The memory the first call of numba-compiled kernels takes in a process, which a layer (or
#: updater) that runs them charges to the job's memory estimate once (:func:`charge_numba`):
#: numba's compiler and LLVM start, load the kernels' machine code and import the modules
#: that lower them (numba's typing and lowering registries, scipy.linalg, ...). Measured,
#: not derived: ``benchmarks/memory_estimate.py`` prints it ("numba's JIT compiler alone":
#: the peak of a process that imports what a run imports and calls each kernel once, minus
#: that of the same process without the calls): 64.8 MiB for the max-pooling kernels,
#: 65.2-65.4 MiB for max and average, with numba 0.68.1 and llvmlite 0.50 on x86-64 Linux
#: (2026-11-27), the kernels loaded from numba's cache as every run after the first does.
#: The first run after an install (or an edit of a kernel's file), which compiles them,
#: takes up to about 20 MiB more (measured with an empty cache: LeNet 14 MiB, CIFAR-10
#: 19 MiB).
NUMBA_JIT_BYTES = 65 << 20
NUMBA_JIT_NOTE = (
    f"{NUMBA_JIT_BYTES >> 20} MiB, measured, that the first call of compiled kernels "
    "(pooling's, a GRU run's steps, kSGD's momentum step, the random draws) takes once in "
    "a process (numba's compiler and LLVM start and load them; numba 0.68, x86-64 Linux; "
    "SINGA_NUMBA=0 runs their numpy paths without it)"
)
NUMBA_JIT_ROW = "numba's JIT compiler"
#: what an updater whose host pass numba compiles returns from
#: :meth:`~singa_core.updater.Updater.host_compiler_memory`
NUMBA_COMPILER = ("numba-jit", NUMBA_JIT_BYTES, NUMBA_JIT_ROW, NUMBA_JIT_NOTE)


def charge_numba(layer) -> None:
    """Charge numba's compiler (:data:`NUMBA_JIT_BYTES`) once, for a layer whose host
    kernels are compiled with it."""
    charge_once(layer, "numba-jit", NUMBA_JIT_BYTES, row=NUMBA_JIT_ROW, note=NUMBA_JIT_NOTE)


def charge_draws(layer) -> None:
    """For a layer that calls ``Layer.draw`` when it runs (call it in ``setup``): on the
    host, where the draws are compiled (numba), numba's compiler is charged once."""
    from singa_core.contracts import draws

    if layer.device.is_host and draws.compiles():
        charge_numba(layer)


def charge_once(layer, key: str, n: int, *, row: str, note: str) -> None:
    """Charge ``n`` bytes of memory the process takes once however many layers need it
    (``key`` names it: numba's JIT compiler for the compiled pooling kernels) to the active
    estimate, as scratch in a row of its own named ``(row)``, when the first layer asks;
    later asks of the same ``key`` charge nothing. ``note`` says under the table what the
    row is and where its number comes from."""
    active = _active.get()
    if active is None:
        return
    estimate, phase = active
    estimate.charge_once(phase, key, n, row=row, note=note, where=layer.ctx.locate(None))
