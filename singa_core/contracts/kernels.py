"""The kernel seam: named kernels, each with one implementation per device kind.

A layer or updater that wants a computation done in as few device launches as possible
(a fused loss, a whole updater step over every Param) calls a **kernel** by name through
its device: ``self.kernels.softmax_xent(...)`` in a layer, ``kernels_for(array).NAME`` in
an updater. It never tests which device it runs on; the device picks the implementation.

The registry (this module's ``_KERNELS``) holds one :class:`Kernel` per name. Its contract:

* ``host`` (required): the numpy implementation, the CPU's fast path (BLAS through
  ctypes, numba where installed, numpy otherwise). It takes and returns numpy arrays and
  Python scalars, writes its results into the ``out`` arrays it is given, and allocates
  nothing per call that it could keep.
* ``cuda`` (optional): the same computation on CuPy arrays in ``launches`` device
  launches (``ElementwiseKernel``, ``RawKernel``, cuBLAS …), reading nothing back to the
  host.
* ``generic`` (optional): the same computation written with the array module's functions
  (numpy's API on any device). A GPU without a ``cuda`` implementation runs this one.

How a device resolves a name (:func:`resolve`):

==========  =========================================================================
``cpu``     ``host``
``cuda``    ``cuda``, else ``generic``, else an error naming the kernel
``standin`` with a ``cuda`` implementation: ``host`` run on the stand-in's arrays as
            ``launches`` counted launches (:func:`standin.launcher`), so the stand-in's
            counts are a GPU's launches; a *composite* kernel's ``cuda``
            implementation (Python composing other kernels and array calls, or an
            algorithm choice) runs on the stand-in as it is; else ``generic`` on the
            stand-in (each of its calls counted, as each is a launch on a GPU)
==========  =========================================================================

Every kernel with a ``cuda`` or ``generic`` implementation is checked against ``host``
by ``tests/core/test_kernels.py`` (on the stand-in for ``generic``, on a GPU for
``cuda``). A plugin defines its own kernels with :func:`define_kernel` when its module is
imported, and may add or replace one device's implementation of any kernel with
:func:`implement` (CONTRIBUTING.md, "A plugin's own kernels").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from singa_core.contracts.errors import SingaError

#: the device kinds a kernel may have implementations for
DEVICE_KINDS = ("host", "cuda", "generic")


@dataclass
class Kernel:
    """One named kernel and its implementations (see the module doc for the contract)."""

    name: str
    doc: str
    host: Callable
    cuda: Callable | None = None
    generic: Callable | None = None
    #: device launches of one ``cuda`` call (what the stand-in counts for it)
    launches: int = 1
    #: True: ``cuda`` is Python over other kernels and array calls (or a choice between
    #: algorithms), which the stand-in runs itself
    composite: bool = False
    #: the module that defined it (for errors and ``singa list-plugins``)
    provider: str = ""
    #: device kind -> the module that implemented it, where not the provider
    implemented_by: dict[str, str] = field(default_factory=dict)


_KERNELS: dict[str, Kernel] = {}


def define_kernel(
    name: str,
    *,
    host: Callable,
    cuda: Callable | None = None,
    generic: Callable | None = None,
    launches: int = 1,
    composite: bool = False,
    doc: str = "",
) -> Kernel:
    """Define the kernel ``name``. Defining it again from the same module (a re-import)
    replaces it; from another module it is an error (use :func:`implement`)."""
    provider = getattr(host, "__module__", "") or ""
    old = _KERNELS.get(name)
    if old is not None and old.provider != provider:
        raise SingaError(
            f"kernel '{name}' is defined twice: by {old.provider} and by {provider}",
            help="give your kernel another name, or add a device's implementation to the "
            "existing one with singa_core.kernels.implement(name, device, fn)",
        )
    k = Kernel(
        name, doc or (host.__doc__ or "").strip(), host, cuda, generic, launches, composite,
        provider,
    )  # fmt: skip
    _KERNELS[name] = k
    _resolved.clear()
    return k


def implement(name: str, device: str, fn: Callable, *, launches: int | None = None) -> None:
    """Give the kernel ``name`` an implementation for ``device`` (``host``, ``cuda`` or
    ``generic``), replacing the one it has."""
    if device not in DEVICE_KINDS:
        raise SingaError(
            f"'{device}' is not a device kind for kernel '{name}'",
            help=f"use one of {', '.join(DEVICE_KINDS)}",
        )
    k = get_kernel(name)
    setattr(k, device, fn)
    if launches is not None:
        k.launches = launches
    k.implemented_by[device] = getattr(fn, "__module__", "") or ""
    _resolved.clear()


def get_kernel(name: str) -> Kernel:
    try:
        return _KERNELS[name]
    except KeyError:
        raise SingaError(
            f"no kernel named '{name}' is defined",
            help="import the module that defines it (singa_core.kernels.define_kernel); "
            f"defined: {', '.join(sorted(_KERNELS)) or 'none'}",
        ) from None


def kernels() -> dict[str, Kernel]:
    """Every defined kernel by name."""
    return dict(_KERNELS)


_resolved: dict[tuple[str, str], Callable] = {}


def resolve(name: str, device_kind: str) -> Callable:
    """The callable that runs kernel ``name`` on a device of kind ``device_kind`` (``cpu``,
    ``cuda`` or ``standin``; see the module doc)."""
    key = (name, device_kind)
    fn = _resolved.get(key)
    if fn is not None:
        return fn
    k = get_kernel(name)
    if device_kind == "cpu":
        fn = k.host
    elif device_kind == "standin":
        if k.cuda is not None and k.composite:
            fn = k.cuda
        elif k.cuda is not None:
            from singa_core.contracts import standin

            fn = standin.launcher(name, k.host, k.launches)
        elif k.generic is not None:
            fn = k.generic
        else:
            fn = _missing(k, device_kind)
    else:
        fn = k.cuda or k.generic or _missing(k, device_kind)
    _resolved[key] = fn
    return fn


def _missing(k: Kernel, device_kind: str) -> Callable:
    def fail(*args, **kwargs):
        raise SingaError(
            f"kernel '{k.name}' (from {k.provider}) has no implementation for {device_kind} "
            "devices",
            help="run the job with --device cpu, or give the kernel a 'cuda' or 'generic' "
            "implementation (singa_core.kernels.implement)",
        )

    return fail


class KernelSet:
    """A device's kernels as attributes: ``device.kernels.softmax_xent(...)``."""

    __slots__ = ("_kind",)

    def __init__(self, device_kind: str) -> None:
        self._kind = device_kind

    def __getattr__(self, name: str) -> Callable:
        if name.startswith("__"):
            raise AttributeError(name)
        return resolve(name, self._kind)


_SETS: dict[str, KernelSet] = {}


def kernel_set(device_kind: str) -> KernelSet:
    s = _SETS.get(device_kind)
    if s is None:
        s = _SETS[device_kind] = KernelSet(device_kind)
    return s


def kernels_for(arr) -> KernelSet:
    """The kernels of the device an array lives on (for code handed arrays, not a
    device: updaters on a server's slices)."""
    import numpy as np

    if isinstance(arr, np.ndarray | np.generic):
        return kernel_set("cpu")
    if type(arr).__name__ == "StandinArray":
        return kernel_set("standin")
    return kernel_set("cuda")
