"""Where a worker computes: the device seam (SINGA 0.3's ``gpu`` field).

A :class:`Device` is the one object that knows which array module a worker's arrays live
in. Layers, updaters, param generators and workers never test what device they run on:
they allocate through ``device.xp`` (``layer.xp`` for a layer) or ``*_like`` an array they
were handed, and call numpy's functions and ufuncs, which dispatch to the array's own
module (NEP-13/NEP-18: CuPy on a GPU). Host data (records read from a store, random draws
from the job's generators) reach the device through :meth:`Device.asarray`; values leave
it through :meth:`Device.to_host` (checkpoints, metrics, exports).

Three kinds:

* ``cpu``: numpy, the default;
* ``cuda:N``: CuPy on NVIDIA GPU N (``pip install 'singa-classic[gpu]'``); opening one
  checks the library, the driver and the index, and every failure is a located
  :class:`~singa_core.contracts.errors.SingaError` whose ``help`` says that ``--device cpu``
  runs the job on the CPU;
* ``standin``: the CPU through :mod:`singa_core.contracts.standin`, an array module that
  refuses silent conversion to numpy as CuPy does: how CI (which has no GPU) and plugin
  authors check that code keeps its arrays on the device. Its kernels run their host
  implementation (exactly the CPU's arithmetic);
* ``standin:cuda``: the same arrays, with every kernel running its **CUDA**
  implementation, the code a GPU runs, compiled for the CPU by the emulated runtime
  (:func:`singa_core.contracts.cuda.emulated`): only the hardware is emulated, and each
  launch, GEMM and upload is counted where the runtime does it.

Random numbers are always drawn on the host from the job's generators and then moved, so
a run draws the same numbers on every device (a GPU run resumes on a CPU and back).

The device a piece of code runs under by default is :func:`default_device` (the CPU unless
:func:`using_device` says otherwise), so the author's kit can run a plugin's checks on any
device without the plugin knowing.
"""

from __future__ import annotations

import contextlib
import contextvars
import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from singa_core.contracts import host_pages
from singa_core.contracts.errors import SingaError

#: what ``--device`` accepts, for help texts
DEVICE_SPECS = "cpu, cuda, cuda:N (N = 0, 1, ...), standin or standin:cuda"
GPU_EXTRA = "pip install 'singa-classic[gpu]'"
ON_CPU_HELP = "--device cpu runs the job on the CPU"


@dataclass(frozen=True, eq=False)
class Device:
    """One place to compute: its kind (``cpu``, ``cuda``, ``standin``), its index (GPU
    number, -1 for the others), its array module ``xp``, and for the stand-in which code
    its kernels run (``code``: ``host``, or ``cuda`` for ``standin:cuda``)."""

    kind: str
    index: int = -1
    xp: object = field(default=np, repr=False)
    code: str = "host"

    # -- naming ---------------------------------------------------------------------------
    @property
    def name(self) -> str:
        if self.kind == "cuda":
            return f"cuda:{self.index}"
        return f"{self.kind}:cuda" if self.code == "cuda" else self.kind

    def __str__(self) -> str:
        return self.name

    def __eq__(self, other) -> bool:
        return isinstance(other, Device) and (self.kind, self.index, self.code) == (
            other.kind, other.index, other.code
        )  # fmt: skip

    def __hash__(self) -> int:
        return hash((self.kind, self.index, self.code))

    @property
    def is_host(self) -> bool:
        """Whether its arrays are numpy arrays (no copies to or from the host)."""
        return self.xp is np

    # -- moving data ---------------------------------------------------------------------
    def asarray(self, host, dtype=None):
        """Host data as an array of this device (a copy unless the device is the host)."""
        if self.is_host:
            return np.asarray(host, dtype=dtype)
        with self.activate():
            return self.xp.asarray(host, dtype=dtype)

    def to_host(self, arr) -> np.ndarray:
        """An array of this device as a numpy array (the array itself on the host)."""
        return to_host(arr)

    # -- allocation ----------------------------------------------------------------------
    def zeros(self, shape, dtype=np.float32):
        if self.kind == "cpu":  # large ones on huge pages (contracts/host_pages.py)
            return host_pages.zeros(shape, dtype)
        with self.activate():
            return self.xp.zeros(shape, dtype=dtype)

    def empty(self, shape, dtype=np.float32):
        with self.activate():
            return self.xp.empty(shape, dtype=dtype)

    # -- kernels ---------------------------------------------------------------------------
    @property
    def kernels(self):
        """This device's implementations of the named kernels
        (:mod:`singa_core.contracts.kernels`): ``device.kernels.NAME(...)``."""
        from singa_core.contracts.kernels import kernel_set

        return kernel_set(self.name if self.kind == "standin" else self.kind)

    # -- the device itself ----------------------------------------------------------------
    def activate(self):
        """A context making this device current for the calling thread (CuPy's
        ``Device(n)``); a no-op for the others."""
        if self.kind == "cuda":
            return self.xp.cuda.Device(self.index)
        if self.kind == "standin":  # updaters find the code to run from their arrays
            return self.xp.running_cuda_code(self.code == "cuda")
        return contextlib.nullcontext()

    def synchronize(self) -> None:
        """Wait for the work queued on the device (for timings); refused while a step is
        captured (:mod:`singa_core.contracts.capture`)."""
        graph = getattr(self.xp, "_graph", None)  # the stand-in's capture under way
        if graph is not None:
            raise graph.refuse("synchronize", "wait for the device")
        if self.kind == "cuda":
            with self.activate():
                self.xp.cuda.get_current_stream().synchronize()

    def memory(self) -> tuple[int, int] | None:
        """``(free, total)`` bytes of device memory, or None for the host."""
        if self.kind != "cuda":
            return None
        with self.activate():
            free, total = self.xp.cuda.runtime.memGetInfo()
        pool = self.xp.get_default_memory_pool()
        return int(free + pool.free_bytes()), int(total)

    def describe(self) -> str:
        """The device in words, for the first lines of a run and for benchmarks."""
        if self.kind == "cuda":
            props = self.xp.cuda.runtime.getDeviceProperties(self.index)
            gpu = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
            free, total = self.memory() or (0, 0)
            return f"cuda:{self.index} ({gpu}, {total / 2**30:.1f} GiB, {free / 2**30:.1f} free)"
        if self.kind == "standin" and self.code == "cuda":
            return "standin:cuda (the kernels' CUDA code, emulated on the CPU)"
        if self.kind == "standin":
            return "standin (the CPU through the stand-in device array module)"
        return "cpu"


CPU = Device("cpu", -1, np)


# -- arrays of any device ------------------------------------------------------------------
def is_host_array(arr) -> bool:
    return isinstance(arr, np.ndarray | np.generic)


def to_host(arr) -> np.ndarray:
    """Any device's array as a numpy array (a copy from a device, the array itself on the
    host); Python and numpy scalars as they are."""
    if isinstance(arr, np.ndarray | np.generic | int | float):
        return arr
    get = getattr(arr, "get", None)
    if get is None:
        return np.asarray(arr)
    return get()


def copy_into(dst, src) -> None:
    """``dst[...] = src`` across devices: either may be a host or a device array (the
    engines' transports: gradients to host buffers, values and bridge data back)."""
    if isinstance(dst, np.ndarray):
        np.copyto(dst, to_host(src).reshape(dst.shape))
        return
    mod = array_module(dst)
    if array_module(src) is not mod:
        host = to_host(src)
        if dst.flags.c_contiguous and hasattr(dst, "set"):  # one copy, no device temporary
            dst.set(np.ascontiguousarray(host, dtype=dst.dtype).reshape(dst.shape))
            return
        src = mod.asarray(host)
    dst[...] = src.reshape(dst.shape)


def array_module(arr):
    """The array module an array belongs to (numpy, CuPy or the stand-in)."""
    if isinstance(arr, np.ndarray | np.generic):
        return np
    if type(arr).__name__ == "StandinArray":
        from singa_core.contracts import standin

        return standin
    mod = sys.modules.get(type(arr).__module__.split(".")[0])
    return mod if mod is not None and hasattr(mod, "asarray") else np


# -- the device in effect -------------------------------------------------------------------
_current: contextvars.ContextVar[Device] = contextvars.ContextVar("singa_device", default=CPU)


def default_device() -> Device:
    """The device new layers, Params and sources use when nothing else says (the CPU,
    unless inside :func:`using_device`)."""
    return _current.get()


@contextlib.contextmanager
def using_device(device: Device) -> Iterator[Device]:
    """Make ``device`` the default of the calling thread's context for the block."""
    token = _current.set(device)
    try:
        with device.activate():
            yield device
    finally:
        _current.reset(token)


# -- opening devices ------------------------------------------------------------------------
_SPEC = re.compile(r"^(cpu|standin|cuda|gpu)(?::(\d+))?$")


def parse_device(spec: str, where: str = "--device") -> tuple[str, int]:
    """``(kind, index)`` of a device spec (``cpu``, ``cuda``, ``cuda:1``, ``gpu:1``,
    ``standin``, ``standin:cuda``); a SingaError for anything else."""
    if str(spec).strip().lower() == "standin:cuda":
        return "standin:cuda", -1
    m = _SPEC.match(str(spec).strip().lower())
    if not m or (m.group(1) in ("cpu", "standin") and m.group(2) is not None):
        raise SingaError(
            f"{spec!r} is not a device",
            where=where,
            help=f"use one of {DEVICE_SPECS}",
        )
    kind = "cuda" if m.group(1) in ("cuda", "gpu") else m.group(1)
    index = int(m.group(2)) if m.group(2) is not None else (0 if kind == "cuda" else -1)
    return kind, index


_opened: dict[tuple[str, int], Device] = {}


def open_device(spec: str | Device, where: str = "--device") -> Device:
    """The device a spec names, checked usable (see the module doc for what is checked)."""
    if isinstance(spec, Device):
        return spec
    kind, index = parse_device(spec, where)
    if kind == "cpu":
        return CPU
    if kind in ("standin", "standin:cuda"):
        from singa_core.contracts import standin

        if kind == "standin:cuda":
            from singa_core.contracts.cuda import emulated

            emulated()  # a located error now when no compiler can build the kernels
            return Device("standin", -1, standin, "cuda")
        return Device("standin", -1, standin)
    key = (kind, index)
    if key not in _opened:
        _opened[key] = _open_cuda(index, where)
    return _opened[key]


def standin_device(code: str = "host") -> Device:
    """The stand-in device; ``code="cuda"``: ``standin:cuda`` (the kernels' CUDA code)."""
    return open_device("standin:cuda" if code == "cuda" else "standin")


def _cuda_error(message: str, where: str, why: str | None = None) -> SingaError:
    help_ = ON_CPU_HELP if why is None else f"{why}; or {ON_CPU_HELP}"
    return SingaError(message, where=where, help=help_)


def _open_cuda(index: int, where: str) -> Device:
    try:
        import cupy
    except ImportError as exc:
        raise _cuda_error(
            f"cuda:{index} needs CuPy, which is not installed ({exc})",
            where,
            f"install the GPU extra: {GPU_EXTRA}",
        ) from None
    except Exception as exc:  # a broken CUDA install raises other errors at import
        raise _cuda_error(
            f"CuPy could not be loaded: {type(exc).__name__}: {exc}",
            where,
            "check the CUDA toolkit and driver (nvidia-smi), and that CuPy matches them",
        ) from None
    runtime = cupy.cuda.runtime
    try:
        count = int(runtime.getDeviceCount())
    except Exception as exc:  # CUDARuntimeError: no driver, no device, driver too old
        # in the user's terms: with no driver at all, CUDA says "insufficient driver"
        from singa_core.contracts.cuda_errors import explain_cuda_failure

        message, help_ = explain_cuda_failure(exc)
        raise SingaError(message, where=where, help=help_) from None
    if count == 0:
        raise _cuda_error("this machine has no CUDA device", where)
    if not 0 <= index < count:
        have = ", ".join(f"cuda:{i}" for i in range(count))
        raise _cuda_error(
            f"cuda:{index} does not exist: this machine has {count} CUDA device(s) ({have})",
            where,
            f"use one of {have}",
        )
    try:
        driver, built = int(runtime.driverGetVersion()), int(runtime.runtimeGetVersion())
    except Exception as exc:
        raise _cuda_error(f"the CUDA driver cannot be queried: {_cuda_text(exc)}", where) from None
    if driver < built // 1000 * 1000:  # a newer minor within the major is compatible
        raise _cuda_error(
            f"the NVIDIA driver supports CUDA {_version(driver)}, but CuPy was built for "
            f"CUDA {_version(built)}: the driver is too old",
            where,
            "update the NVIDIA driver, or install the CuPy build for your CUDA "
            "(cupy-cuda12x, cupy-cuda13x)",
        )
    try:
        with cupy.cuda.Device(index):
            cupy.zeros(1, dtype=cupy.float32).sum().item()  # a kernel runs
    except Exception as exc:
        from singa_core.contracts.cuda_errors import explain_cuda_failure

        message, help_ = explain_cuda_failure(exc, f"cuda:{index} cannot run a kernel")
        raise SingaError(message, where=where, help=help_) from None
    return Device("cuda", index, cupy)


def _version(v: int) -> str:
    return f"{v // 1000}.{v % 1000 // 10}"


def _cuda_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".strip()


# -- SINGA 0.3's gpu field -------------------------------------------------------------------
def worker_device_specs(gpus: Sequence[int], nworkers: int, override: str | None) -> list[str]:
    """The device spec of each of a group's ``nworkers`` workers.

    SINGA 0.3: the i-th worker runs on ``gpu[i]``; workers beyond the list run on the
    CPU. An override (``--device``) puts every worker on that device, or, as a
    comma-separated list (``cuda:0,cpu``), worker i on its i-th entry and the workers beyond
    it on the CPU."""
    if override is not None:
        parts = [p.strip() for p in str(override).split(",")]
        if len(parts) == 1:
            return [parts[0]] * nworkers
        return [parts[i] if i < len(parts) else "cpu" for i in range(nworkers)]
    return [f"cuda:{gpus[i]}" if i < len(gpus) else "cpu" for i in range(nworkers)]
