"""A training step's device work recorded once and replayed: a CUDA graph on the stand-in.

On a GPU a step of these nets is bound by launching, not computing; a CUDA graph records
the step's launches once and replays them with one call. What a graph can hold is narrow,
and the stand-in checks it on the CPU (``standin:cuda``: the kernels' CUDA code, the
hardware emulated):

* a **node** is a kernel launch, a GEMM, or a copy from host memory into a device array
  that already exists (``dst.set(host)``); it keeps its arrays (fixed addresses) and its
  scalar arguments as they were at capture;
* a **device read** (``float(x)``, ``x.get()``, ``bool(x)``), an **allocation** (an
  operation that makes a new device array: ``x + y`` without ``out=``, ``xp.empty``, a
  reduction to a fresh scalar, ``xp.asarray(host)``) and a **host synchronisation**
  (``device.synchronize()``) are refused while capturing: :class:`CaptureRefused` names
  the call and the layer (or updater) that made it;
* views (reshape, slices, transposes) are no device work: they are not recorded.

So what changes from step to step must live in memory a node reads: the input batch in
the host buffer its copy node reads (refilled in place by the input layers, the step's
host part), the learning rate and the step number in the device's step scalars
(:class:`StepScalars`), random draws made on the device from those (counter-based).
Python code runs once, at capture: a replay does not run it again.

:func:`capturing` records while the step runs (the capture step itself computes as an eager
step does); :meth:`Graph.replay` runs the nodes again in order, each counted as the launch
it is.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from singa_core.contracts.errors import SingaError

#: what a refusal's help says (the CLI option is named by the engine that captures)
GRAPH_HELP = (
    "a captured step may only launch kernels on arrays allocated before the capture and "
    "copy host buffers into them; move the read to a display step (metrics stay on the "
    "device until then), allocate in setup, or train without graphs"
)


class CaptureRefused(SingaError):
    """A call a captured step cannot make (see the module doc)."""


@dataclass
class Node:
    """One recorded piece of device work: run again by :meth:`Graph.replay`."""

    name: str
    kind: str  # "kernels" (a launch or a GEMM) or "to_device" (a copy from the host)
    run: Callable[[], object]
    launches: int = 1
    keep: tuple = ()  # what the node's raw pointers point into (kept alive)


@dataclass
class Graph:
    """The recorded device work of one step."""

    nodes: list[Node] = field(default_factory=list)

    def record(self, name: str, kind: str, run, launches: int, keep: tuple) -> None:
        """A node, as the stand-in and the emulated runtime hand it over."""
        self.nodes.append(Node(name, kind, run, launches, keep))

    def replay(self) -> None:
        """Run every node again, in order; each is counted (when the stand-in counts) as
        the launch or copy it is."""
        from singa_core.contracts import standin

        with standin.replaying():
            for node in self.nodes:
                node.run()
        for node in self.nodes:
            for _ in range(node.launches):
                standin.record(node.name, node.kind)

    @property
    def launches(self) -> int:
        return sum(n.launches for n in self.nodes if n.kind == "kernels")

    def refuse(self, call: str, what: str) -> CaptureRefused:
        """The error for ``call`` doing ``what`` while capturing, naming its culprit."""
        return CaptureRefused(
            f"a captured step cannot {what}: {call} by {culprit()}", help=GRAPH_HELP
        )


_active: Graph | None = None


@contextlib.contextmanager
def capturing() -> Iterator[Graph]:
    """Record the device work of the block into a :class:`Graph` (every thread's; one
    capture at a time). The block's work also runs, as it would eagerly."""
    from singa_core.contracts import standin

    global _active
    if _active is not None:
        raise RuntimeError("a capture is already under way")
    _active = graph = Graph()
    try:
        with standin.capturing_calls(graph):
            yield graph
    finally:
        _active = None


def active() -> Graph | None:
    """The graph being captured, or None."""
    return _active


def culprit() -> str:
    """Who made the current call: the innermost layer, run of unrolled copies or updater
    among the callers (with its method), else the innermost caller outside the device
    modules."""
    frame = sys._getframe(1)
    fallback = None
    while frame is not None:
        me = frame.f_locals.get("self")
        method = frame.f_code.co_name
        bases = _contract_bases(me)
        if "layer.Layer" in bases:
            kind = (getattr(me, "type_names", None) or (type(me).__name__,))[0]
            return f"layer '{me.name}' ({kind}) in {method}"
        if "sequences.SequenceRun" in bases:
            return f"the unrolled copies {me.name} in {method}"
        if "updater.Updater" in bases:
            return f"the updater {type(me).__name__} in {method}"
        module = frame.f_globals.get("__name__", "")
        if fallback is None and not module.startswith(("singa_core.contracts", "contextlib")):
            fallback = f"{module}.{method} (line {frame.f_lineno})"
        frame = frame.f_back
    return fallback or "the step"


def _contract_bases(obj) -> set[str]:
    """``module.Class`` of the contract classes among ``obj``'s type's bases (by name: the
    contracts import this module)."""
    prefix = "singa_core.contracts."
    return {
        f"{c.__module__.removeprefix(prefix)}.{c.__name__}"
        for c in type(obj).__mro__
        if c.__module__.startswith(prefix)
    }


def _module_of(arr):
    """The array module of ``arr`` (numpy, the stand-in, CuPy)."""
    import numpy as np

    if isinstance(arr, np.ndarray | np.generic):
        return np
    name = type(arr).__module__
    return sys.modules.get(name if "standin" in name else name.split(".")[0], np)


# -- numbers that change every step ---------------------------------------------------------
class StepValue:
    """A number that changes from step to step (a learning rate), kept in device memory
    that kernels read through a pointer: a replayed launch reads the memory, not a value
    captured with it. ``fn(step)`` gives the number; :meth:`at` returns the (1,) float64
    device array holding it for ``step``, copied there (one small copy) when it changed.
    Every StepValue alive is brought to a step by :func:`prepare_step`, which a graph
    runner calls in the step's host part, before the replay."""

    def __init__(self, fn, like) -> None:
        import numpy as np

        self.fn = fn
        self.host = np.full(1, np.nan, dtype=np.float64)
        xp = _module_of(like)
        self.device = self.host if xp is np else xp.empty(1, dtype=np.float64)
        _thread().values.add(self)

    def at(self, step: int):
        self.prepare(step)
        return self.device

    def prepare(self, step: int) -> None:
        value = float(self.fn(step))
        if self.host[0] == value:
            return
        self.host[0] = value
        if self.device is not self.host:
            self.device.set(self.host)


class StepScope:
    """The StepValues of one run of steps (a training loop): what :func:`prepare_step`
    brings to each step, and that run's step number per device."""

    def __init__(self) -> None:
        self.values: weakref.WeakSet = weakref.WeakSet()
        self.numbers: dict[int, StepValue] = {}  # id(array module) -> the step there
        self.step = 0  # the step the run is at (a StepValue made later starts there)


_local = threading.local()


def _scopes() -> list[StepScope]:
    if not hasattr(_local, "scopes"):
        _local.scopes = [StepScope()]  # outside any run: a step number that stays 0
    return _local.scopes


def _thread() -> StepScope:
    """The scope StepValues made now belong to: the innermost run of this thread (engines
    run several workers in threads of one process)."""
    return _scopes()[-1]


@contextlib.contextmanager
def step_scope() -> Iterator[StepScope]:
    """A run of steps (the training loop, a test pass) with StepValues of its own."""
    scopes = _scopes()
    scopes.append(scope := StepScope())
    try:
        yield scope
    finally:
        scopes.remove(scope)


def step_number(like) -> StepValue:
    """The step number in memory of ``like``'s device (what a layer's random draws are
    counted by): the training loop brings it to each step through :func:`prepare_step`."""
    numbers = _thread().numbers
    key = id(_module_of(like))
    value = numbers.get(key)
    if value is None:
        value = numbers[key] = StepValue(float, like)
        value.prepare(_thread().step)
    return value


def prepare_step(step: int) -> None:
    """Bring every :class:`StepValue` of this thread's run to ``step`` (the training loop,
    at the start of each step; a replayed step's host part)."""
    scope = _thread()
    scope.step = step
    for v in list(scope.values):
        v.prepare(step)
