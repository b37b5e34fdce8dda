"""Which library multiplies float32 matrices on the host: numpy's OpenBLAS, or Intel's MKL.

Every host GEMM of singa goes through :func:`singa_core.contracts.blas.gemm`, which calls
one ``cblas_sgemm``: numpy's own OpenBLAS (always there), or MKL's when the optional extra
``singa-classic[mkl]`` is installed. Which is faster depends on the CPU: MKL is 15-40%
faster than OpenBLAS at a training step's shapes on the Intel Xeons measured, OpenBLAS is
often the faster on AMD's. So the choice is made from the machine itself:

* ``SINGA_SGEMM=openblas`` or ``SINGA_SGEMM=mkl`` chooses (``mkl`` without the extra is
  an error naming it; ``auto`` is the rule below);
* otherwise MKL on an Intel CPU (``vendor_id`` GenuineIntel in ``/proc/cpuinfo``) when the
  extra is installed, OpenBLAS on any other CPU or without MKL.

The rule reads the machine, not a clock: a timed choice would differ between two runs of
one job on a loaded machine, and their results with it.
A library's results differ from the other's in the last bits, as OpenBLAS's own differ
between CPUs; the choice is printed with the machine facts (:func:`describe`).
"""

from __future__ import annotations

import ctypes
import glob
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from singa_core.contracts.openblas import find_sgemm, saxpy_argtypes, sgemm_argtypes

#: the environment variable that forces a library
ENV_VAR = "SINGA_SGEMM"
CHOICES = ("openblas", "mkl")


@dataclass
class SgemmLibrary:
    """One ``cblas_sgemm`` (row-major CBLAS signature) and how to set its threads."""

    name: str  # "openblas" or "mkl"
    version: str
    sgemm: object  # the ctypes function, argtypes set
    set_threads: object | None = None  # callable(n) or None (numpy's pool is set elsewhere)
    saxpy: object | None = None  # its cblas_saxpy (argtypes set), or None
    #: MKL's packed GEMM (``cblas_sgemm_pack_get_size``, ``cblas_sgemm_pack``,
    #: ``cblas_sgemm_compute``, argtypes set), or None: see :class:`blas.FixedOperand`
    packed: tuple | None = None


_lock = threading.Lock()
_libraries: dict[str, SgemmLibrary | None] = {}
_chosen: SgemmLibrary | None = None
_why = ""


def _openblas() -> SgemmLibrary | None:
    fn = find_sgemm()
    if not fn:
        return None
    import numpy as np

    version = "?"
    try:
        cfg = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        version = str(cfg.get("version", "?"))
    except Exception:  # noqa: BLE001 - only a label
        pass
    return SgemmLibrary("openblas", version, fn)


def mkl_path() -> str | None:
    """libmkl_rt of the ``mkl`` distribution installed in this environment, or None."""
    try:
        from importlib.metadata import PackageNotFoundError, distribution

        dist = distribution("mkl")
    except (ImportError, PackageNotFoundError):
        dist = None
    candidates = []
    if dist is not None:
        for f in dist.files or ():
            if Path(str(f)).name.startswith("libmkl_rt.so"):
                candidates.append(str(dist.locate_file(f)))
    candidates += sorted(glob.glob(os.path.join(sys.prefix, "lib", "libmkl_rt.so*")))
    for path in candidates:
        if os.path.exists(path):
            return os.path.realpath(path)
    return None


def _mkl() -> SgemmLibrary | None:
    path = mkl_path()
    if path is None:
        return None
    try:
        lib = ctypes.CDLL(path)
        fn = lib.cblas_sgemm
    except (OSError, AttributeError):
        return None
    # libmkl_rt's default interface is LP64 (32-bit sizes)
    fn.restype, fn.argtypes = None, sgemm_argtypes(ctypes.c_int)
    version = "?"
    try:
        buf = ctypes.create_string_buffer(256)
        lib.MKL_Get_Version_String(buf, 256)
        version = buf.value.decode(errors="replace").split("Product")[0].strip()
        version = version.removeprefix("Intel(R) oneAPI Math Kernel Library Version ")
        version = version.strip(" -")
    except (AttributeError, OSError):
        pass
    setter = lib.MKL_Set_Num_Threads
    setter.argtypes = [ctypes.c_int]
    setter.restype = None
    saxpy = lib.cblas_saxpy
    saxpy.restype, saxpy.argtypes = None, saxpy_argtypes(ctypes.c_int)
    return SgemmLibrary(
        "mkl", version, fn, lambda n: setter(max(1, int(n))), saxpy, _mkl_packed(lib)
    )


def _mkl_packed(lib) -> tuple | None:
    """MKL's packed-GEMM functions with their argument types, or None (an MKL without)."""
    try:
        size, pack, compute = (
            lib.cblas_sgemm_pack_get_size,
            lib.cblas_sgemm_pack,
            lib.cblas_sgemm_compute,
        )
    except AttributeError:
        return None
    i, f, p = ctypes.c_int, ctypes.c_float, ctypes.c_void_p
    size.restype, size.argtypes = ctypes.c_size_t, [i, i, i, i]
    pack.restype, pack.argtypes = None, [i, i, i, i, i, i, f, p, i, p]
    compute.restype, compute.argtypes = None, [i, i, i, i, i, i, p, i, p, i, f, p, i]
    return size, pack, compute


def library(name: str) -> SgemmLibrary | None:
    """The library ``name`` (``"openblas"`` or ``"mkl"``), loaded once; None when absent."""
    with _lock:
        if name not in _libraries:
            _libraries[name] = _openblas() if name == "openblas" else _mkl()
        return _libraries[name]


def threads_changed(n: int) -> None:
    """The process's BLAS thread count is now ``n``
    (:func:`singa_core.contracts.blas.set_blas_threads`): MKL's too, when it is loaded."""
    lib = _libraries.get("mkl")
    if lib is not None and lib.set_threads is not None:
        lib.set_threads(n)


# -- the choice ----------------------------------------------------------------------------
def cpu_vendor(cpuinfo: str | None = None) -> str:
    """The CPU's vendor id (``"GenuineIntel"``, ``"AuthenticAMD"``, …; ``""`` unknown)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return ""
    for line in cpuinfo.splitlines():
        if line.startswith("vendor_id"):
            return line.split(":", 1)[1].strip()
    return ""


def rule(vendor: str, installed: set[str], forced: str = "") -> tuple[str | None, str]:
    """(library name, why) by the rule of the module's doc: ``forced`` (SINGA_SGEMM) when
    set, else MKL on an Intel CPU when installed, else OpenBLAS."""
    if forced in CHOICES:
        return forced, f"{ENV_VAR}={forced}"
    if "mkl" in installed and vendor == "GenuineIntel":
        return "mkl", "an Intel CPU, and singa-classic[mkl] is installed"
    if "openblas" in installed:
        if "mkl" in installed:
            return "openblas", f"not an Intel CPU ({vendor or 'vendor unknown'})"
        return "openblas", "numpy's"
    return ("mkl", "the only one installed") if "mkl" in installed else (None, "")


def _current_threads() -> int:
    from singa_core.contracts.openblas import openblas_threads

    return int(openblas_threads() or 1)


def chosen(threads: int | None = None) -> SgemmLibrary | None:
    """The library every host GEMM uses (see the module's doc); None only when neither is
    usable (then numpy's own product is used)."""
    if _chosen is not None:
        return _chosen
    forced = os.environ.get(ENV_VAR, "").strip().lower()
    if forced and forced not in ("auto", *CHOICES):
        from singa_core.contracts.errors import SingaError

        raise SingaError(
            f"{ENV_VAR}={forced!r} is not a BLAS singa knows",
            where=f"{ENV_VAR} (environment)",
            help=f"set {ENV_VAR} to openblas, mkl, or auto (MKL on Intel CPUs when installed)",
        )
    # what is installed, without loading MKL where the rule will not use it
    installed = {"openblas"} | ({"mkl"} if mkl_path() is not None else set())
    if forced in CHOICES and library(forced) is None:
        from singa_core.contracts.errors import SingaError

        raise SingaError(
            f"{ENV_VAR}={forced} but {forced} is not installed here",
            where=f"{ENV_VAR} (environment)",
            help="pip install 'singa-classic[mkl]', or unset " + ENV_VAR,
        )
    name, why = rule(cpu_vendor(), installed, forced)
    lib = library(name) if name else None
    if lib is None and name == "mkl":  # installed but not loadable: numpy's, and why
        lib, why = library("openblas"), f"MKL at {mkl_path()} did not load"
    _set(lib, _current_threads() if threads is None else int(threads), why)
    return lib


def _set(lib: SgemmLibrary | None, threads: int, why: str) -> None:
    global _chosen, _why
    if lib is not None and lib.set_threads is not None:
        lib.set_threads(threads)
    _chosen, _why = lib, why


def describe() -> str:
    """``"sgemm: mkl 2026.2 (faster here (…))"``: the library in use and why."""
    lib = chosen()
    if lib is None:
        return "sgemm: numpy's own product (no cblas_sgemm found)"
    return f"sgemm: {lib.name} {lib.version} ({_why})"


def forget() -> None:
    """Choose again at the next GEMM (the environment changed: tests)."""
    global _chosen
    _chosen = None
