"""Checking a kernel's CUDA code on the CPU: the author's kit for the kernel seam.

:func:`check_kernel` runs a kernel (:mod:`singa_core.kernels`) three ways on one set of
arguments and compares them:

1. its ``host`` implementation on numpy arrays (the reference);
2. its CUDA code compiled for the CPU by the emulated runtime
   (:class:`singa_core.cuda.EmulatedRuntime`), as :func:`singa_core.kernels.cuda_code`
   runs it on a GPU (``generic`` where the kernel's ``fits`` says no): every output within
   ``tol`` of the host's;
3. the same CUDA code on the ``standin:cuda`` device, counted: no device read, and where
   ``fits`` takes the arguments, exactly the ``launches`` the kernel declares (what the
   plain ``standin`` device counts for it).

It needs a C++ compiler (the emulated runtime builds the CUDA C with it) and skips, under
pytest, when none is installed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from singa_core.contracts import kernels as K
from singa_core.contracts import standin
from singa_core.contracts.cuda import EmulatedRuntime
from singa_core.contracts.device import open_device


def emulated_cuda_device():
    """The ``standin:cuda`` device: the stand-in's arrays, every kernel running its CUDA
    code on the CPU (``using_device(emulated_cuda_device())`` runs a layer's checks there)."""
    return open_device("standin:cuda")


@dataclass(frozen=True)
class KernelReport:
    """What :func:`check_kernel` saw: whether the CUDA code took the arguments (``fits``),
    the launches it made on ``standin:cuda``, and the largest difference from ``host``."""

    name: str
    fits: bool
    launches: int
    reads: int
    max_difference: float


_runtime: EmulatedRuntime | None = None


def _emulated() -> EmulatedRuntime:
    global _runtime
    if EmulatedRuntime.compiler() is None:
        import pytest

        pytest.skip("no C++ compiler to emulate the CUDA kernels with")
    if _runtime is None:
        _runtime = EmulatedRuntime()
    return _runtime


def _copy(x):
    if isinstance(x, np.ndarray):
        return x.copy()
    if isinstance(x, list):
        return [_copy(v) for v in x]
    return x


def _to_device(x, dev):
    if isinstance(x, np.ndarray):
        return dev.asarray(x)
    if isinstance(x, list):
        return [_to_device(v, dev) for v in x]
    return x


def _to_host(x):
    if isinstance(x, list):
        return [_to_host(v) for v in x]
    return None if x is None else np.asarray(x.get() if hasattr(x, "get") else x)


def _difference(name: str, j: int, want, got, tol: float) -> float:
    if isinstance(want, list):
        return max(
            [_difference(name, j, w, g, tol) for w, g in zip(want, got, strict=True)] or [0.0]
        )
    if want is None:
        assert got is None, f"{name}: argument {j} should stay None"
        return 0.0
    want, got = np.asarray(want), np.asarray(got)
    if tol == 0:
        np.testing.assert_array_equal(got, want, err_msg=f"{name}: argument {j}")
        return 0.0
    np.testing.assert_allclose(
        got, want, rtol=tol, atol=tol, err_msg=f"{name}: argument {j}, CUDA code against host"
    )
    if want.size == 0 or want.dtype.kind not in "fc":
        return 0.0
    return float(np.max(np.abs(got.astype(np.float64) - want)))


def check_kernel(name: str, args: Sequence, outs: Sequence[int], tol: float = 1e-6) -> KernelReport:
    """Check kernel ``name`` on ``args`` (numpy arrays, lists of them and scalars, as the
    layer passes them); ``outs``: the indices of the arguments it writes; ``tol``: the
    allowed difference from ``host`` (0: bit for bit; float32 sums in another order need
    about 1e-6). See the module doc for what is compared."""
    kernel = K.get_kernel(name)
    if kernel.cuda is None:
        raise ValueError(f"kernel '{name}' has no cuda implementation to check")
    host_args, cuda_args = _copy(list(args)), _copy(list(args))
    kernel.host(*host_args)
    fits = kernel.fits is None or bool(kernel.fits(*cuda_args))
    K.cuda_code(name, _emulated())(*cuda_args)
    worst = max([_difference(name, j, host_args[j], cuda_args[j], tol) for j in outs] or [0.0])
    dev = emulated_cuda_device()
    dev_args = _to_device(_copy(list(args)), dev)
    with dev.activate(), standin.counting() as counts:
        getattr(dev.kernels, name)(*dev_args)
    for j in outs:
        _difference(name, j, cuda_args[j], _to_host(dev_args[j]), 0)
    assert counts.reads == 0, f"{name}: its CUDA code read the device {counts.reads} times"
    if fits and not kernel.composite:
        assert counts.kernels == kernel.launches, (
            f"{name} declares {kernel.launches} launch(es) but its CUDA code made "
            f"{counts.kernels}: {dict(counts.by_name)} (set define_kernel's launches=)"
        )
    return KernelReport(name, fits, counts.kernels, counts.reads, worst)
