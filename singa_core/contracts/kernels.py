"""The kernel seam: named kernels, each with one implementation per kind of device.

A layer or updater that wants a computation done in as few device launches as possible
(a fused loss, a whole updater step over every Param) calls a **kernel** by name through
its device: ``self.kernels.softmax_xent(...)`` in a layer, ``kernels_for(array).NAME`` in
an updater. It never tests which device it runs on; the registry picks the code.

The registry (this module's ``_KERNELS``) holds one :class:`Kernel` per name, made by
:func:`define_kernel`. Its contract, the one way to write a kernel:

* ``host`` (required): the numpy implementation, the CPU's fast path (BLAS through
  ctypes, numba where installed, numpy otherwise). It takes numpy arrays and Python
  scalars, writes its results into the ``out`` arrays it is given, and allocates nothing
  per call that it could keep.
* ``cuda`` (optional): the same computation as a GPU runs it: Python that launches CUDA C
  through the runtime it is handed as the keyword ``rt`` (``rt.kernel(source, name)``,
  ``rt.gemm``, ``rt.table``; :mod:`singa_core.contracts.cuda`). It never tests its
  arguments to choose another path itself: that is ``fits``.
* ``fits`` (optional, with ``cuda``): ``fits(*args)`` says whether ``cuda`` takes these
  arguments (layouts it can index, say); when it says no, the registry runs ``generic``.
* ``generic`` (optional): the same computation with the array module's functions
  (numpy's API on any device). A device without a usable ``cuda`` runs it.
* ``launches``: the launches one ``cuda`` call makes, which the plain ``standin`` device
  counts for it; the ``standin:cuda`` device counts what the CUDA code really launches,
  and :func:`singa_core.testing.check_kernel` fails when the two differ.

How a device resolves a name (:func:`resolve`):

================  ====================================================================
``cpu``           ``host``
``cuda``          ``cuda`` with CuPy's runtime (``generic`` where ``fits`` says no);
                  else ``generic``; else an error naming the kernel
``standin:cuda``  as ``cuda``, with the emulated runtime over the stand-in's arrays:
                  the code a GPU runs, only the hardware emulated
``standin``       with a ``cuda`` implementation: ``host`` on the stand-in's arrays as
                  ``launches`` counted launches (exactly the CPU's arithmetic); else
                  ``generic`` (each of its calls counted, as each is a launch on a GPU)
================  ====================================================================

A *composite* kernel (``composite=True``) is a choice between algorithms (its ``cuda`` is
Python returning a decision); every device but the CPU runs its ``cuda`` as it is.

A plugin defines its own kernels with :func:`define_kernel` when its module is imported,
and may add or replace one device's implementation of any kernel with :func:`implement`
(CONTRIBUTING.md, "A layer with its own GPU kernel").
"""

from __future__ import annotations

import functools
import inspect
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
    #: ``fits(*args)``: whether ``cuda`` takes these arguments (else ``generic`` runs)
    fits: Callable | None = None
    #: device launches of one ``cuda`` call (what the plain stand-in counts for it)
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
    fits: Callable | None = None,
    launches: int = 1,
    composite: bool = False,
    doc: str = "",
) -> Kernel:
    """Define the kernel ``name`` (the module doc gives the contract of each part). A
    ``cuda`` made by :func:`singa_core.cuda.elementwise_kernel` brings its own ``fits``.
    Defining it again from the same module (a re-import) replaces it; from another module
    it is an error (use :func:`implement`)."""
    provider = getattr(host, "__module__", "") or ""
    fits = fits if fits is not None else getattr(cuda, "fits", None)
    if fits is not None and generic is None:
        raise SingaError(
            f"kernel '{name}' has a 'fits' test but no 'generic' implementation to run "
            "where it says no",
            help="give define_kernel a generic= implementation (numpy's API on any device)",
        )
    old = _KERNELS.get(name)
    if old is not None and old.provider != provider:
        raise SingaError(
            f"kernel '{name}' is defined twice: by {old.provider} and by {provider}",
            help="give your kernel another name, or add a device's implementation to the "
            "existing one with singa_core.kernels.implement(name, device, fn)",
        )
    k = Kernel(
        name, doc or (host.__doc__ or "").strip(), host, cuda, generic, fits, launches,
        composite, provider,
    )  # fmt: skip
    _KERNELS[name] = k
    _resolved.clear()
    return k


def implement(
    name: str, device: str, fn: Callable, *, launches: int | None = None,
    fits: Callable | None = None,
) -> None:  # fmt: skip
    """Give the kernel ``name`` an implementation for ``device`` (``host``, ``cuda`` or
    ``generic``), replacing the one it has; a ``cuda`` one comes with its ``fits`` (an
    argument, or the function's own ``fits`` attribute; none: it takes every call)."""
    if device not in DEVICE_KINDS:
        raise SingaError(
            f"'{device}' is not a device kind for kernel '{name}'",
            help=f"use one of {', '.join(DEVICE_KINDS)}",
        )
    k = get_kernel(name)
    setattr(k, device, fn)
    if device == "cuda":
        k.fits = fits if fits is not None else getattr(fn, "fits", None)
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

#: the device kinds :func:`resolve` knows (a Device's ``kernels`` names one)
RESOLVED_KINDS = ("cpu", "cuda", "standin", "standin:cuda")


def resolve(name: str, device_kind: str) -> Callable:
    """The callable that runs kernel ``name`` on a device of kind ``device_kind`` (one of
    :data:`RESOLVED_KINDS`; see the module doc)."""
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
    elif device_kind == "standin:cuda":
        from singa_core.contracts.cuda import emulated

        fn = cuda_code(name, emulated())
    else:
        from singa_core.contracts.cuda import CUPY

        fn = cuda_code(name, CUPY)
    _resolved[key] = fn
    return fn


def _takes_runtime(fn: Callable) -> bool:
    try:
        return "rt" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def cuda_code(name: str, rt) -> Callable:
    """Kernel ``name`` as a GPU runs it, on the runtime ``rt``: its ``cuda`` code with
    ``rt`` passed (``generic`` where ``fits`` says no); ``generic`` when it has no
    ``cuda``. ``cuda_code(name, EmulatedRuntime())(*numpy_arrays)`` runs the CUDA C on
    the CPU: how :func:`singa_core.testing.check_kernel` checks it against ``host``."""
    k = get_kernel(name)
    if k.cuda is None:
        return k.generic or _missing(k, "cuda")
    code = functools.partial(k.cuda, rt=rt) if _takes_runtime(k.cuda) else k.cuda
    if k.fits is None or k.composite:
        return code
    fits, generic = k.fits, k.generic

    def run(*args, **kwargs):
        if fits(*args, **kwargs):
            return code(*args, **kwargs)
        return generic(*args, **kwargs)

    run.__name__ = name
    return run


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
        from singa_core.contracts import standin

        return kernel_set("standin:cuda" if standin.runs_cuda_code() else "standin")
    return kernel_set("cuda")
