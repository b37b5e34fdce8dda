"""numpy's OpenBLAS: the handles of the library numpy loaded, and its symbols.

The scipy-openblas builds numpy's wheels ship prefix their symbols (``scipy_openblas_…``,
``scipy_cblas_…``, with ``64_`` suffixes for 64-bit integers); these are looked up under
every spelling. :mod:`singa_core.contracts.blas` sets and reads its thread count through
them, and :mod:`singa_core.contracts.sgemm` takes its ``cblas_sgemm``.
"""

from __future__ import annotations

import ctypes
import glob
import os

SETTERS = (
    "scipy_openblas_set_num_threads64_",
    "scipy_openblas_set_num_threads",
    "openblas_set_num_threads64_",
    "openblas_set_num_threads",
)
GETTERS = tuple(s.replace("set_num", "get_num") for s in SETTERS)


def openblas_libraries() -> list[ctypes.CDLL]:
    """Handles of the OpenBLAS numpy loaded (never loading another), then the process's
    global namespace."""
    import numpy

    libs = []
    base = os.path.dirname(numpy.__file__)
    for pattern in (
        "../numpy.libs/*openblas*.so*",
        ".libs/*openblas*",
        "../numpy.libs/*openblas*.dll",
    ):
        for path in glob.glob(os.path.join(base, pattern)):
            try:
                libs.append(
                    ctypes.CDLL(path, mode=getattr(ctypes, "RTLD_NOLOAD", 0) | ctypes.RTLD_GLOBAL)
                )
            except OSError:
                continue
    try:
        libs.append(ctypes.CDLL(None))
    except OSError:
        pass
    return libs


def sgemm_argtypes(itype) -> list:
    """``cblas_sgemm``'s argument types, with sizes of ``itype`` (``c_int``/``c_int64``)."""
    i, f, p = itype, ctypes.c_float, ctypes.c_void_p
    return [ctypes.c_int, ctypes.c_int, ctypes.c_int, i, i, i, f, p, i, p, i, f, p, i]


def saxpy_argtypes(itype) -> list:
    """``cblas_saxpy``'s argument types, with sizes of ``itype``."""
    return [itype, ctypes.c_float, ctypes.c_void_p, itype, ctypes.c_void_p, itype]


def find_cblas(name: str, argtypes):
    """numpy's OpenBLAS's ``cblas_<name>`` under any of its spellings (64-bit sizes
    first), with its argument types set (``argtypes(itype)``), or False when absent."""
    spellings = (
        (f"scipy_cblas_{name}64_", ctypes.c_int64),
        (f"cblas_{name}64_", ctypes.c_int64),
        (f"scipy_cblas_{name}", ctypes.c_int),
        (f"cblas_{name}", ctypes.c_int),
    )
    for lib in openblas_libraries():
        for sym, itype in spellings:
            fn = getattr(lib, sym, None)
            if fn is not None:
                fn.restype = None
                fn.argtypes = argtypes(itype)
                return fn
    return False


def find_sgemm():
    """numpy's OpenBLAS's ``cblas_sgemm`` (argtypes set), or False when absent."""
    return find_cblas("sgemm", sgemm_argtypes)


def find_saxpy():
    """numpy's OpenBLAS's ``cblas_saxpy`` (argtypes set), or False when absent."""
    return find_cblas("saxpy", saxpy_argtypes)


_getter = None  # not yet looked up; then the getter function, or False


def openblas_threads() -> int | None:
    """numpy's OpenBLAS's thread count, or None when it cannot be read (its getter looked
    up once: the host passes read the count at every call)."""
    global _getter
    if _getter is None:
        _getter = False
        for lib in openblas_libraries():
            fn = next((getattr(lib, s) for s in GETTERS if getattr(lib, s, None)), None)
            if fn is not None:
                fn.restype = ctypes.c_int
                _getter = fn
                break
    return int(_getter()) if _getter else None
