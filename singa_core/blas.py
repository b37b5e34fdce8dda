"""Pin the number of BLAS threads of this process (SINGA's ``num_openblas_threads``).

Uses the OpenBLAS that numpy loaded (``openblas_set_num_threads``, under the symbol names
of the scipy-openblas builds numpy's wheels ship). Engines call :func:`set_blas_threads`
in every worker process; without a known OpenBLAS it does nothing and says so.
"""

from __future__ import annotations

import ctypes
import glob
import os

_SETTERS = (
    "scipy_openblas_set_num_threads64_",
    "scipy_openblas_set_num_threads",
    "openblas_set_num_threads64_",
    "openblas_set_num_threads",
)
_GETTERS = tuple(s.replace("set_num", "get_num") for s in _SETTERS)


def _openblas_libs() -> list[ctypes.CDLL]:
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


def set_blas_threads(n: int) -> bool:
    """Set OpenBLAS's thread count; True if an OpenBLAS was found and set."""
    n = max(1, int(n))
    for lib in _openblas_libs():
        for sym in _SETTERS:
            fn = getattr(lib, sym, None)
            if fn is not None:
                fn(ctypes.c_int(n))
                return True
    return False


def get_blas_threads() -> int | None:
    for lib in _openblas_libs():
        for sym in _GETTERS:
            fn = getattr(lib, sym, None)
            if fn is not None:
                fn.restype = ctypes.c_int
                return int(fn())
    return None


_SAXPY_SYMBOLS = (  # (symbol, integer type of its sizes)
    ("scipy_cblas_saxpy64_", ctypes.c_int64),
    ("cblas_saxpy64_", ctypes.c_int64),
    ("scipy_cblas_saxpy", ctypes.c_int),
    ("cblas_saxpy", ctypes.c_int),
)
_saxpy = None  # resolved lazily: a ctypes function, or False when unavailable


def _find_saxpy():
    for lib in _openblas_libs():
        for sym, itype in _SAXPY_SYMBOLS:
            fn = getattr(lib, sym, None)
            if fn is not None:
                fn.restype = None
                fn.argtypes = [
                    itype,
                    ctypes.c_float,
                    ctypes.c_void_p,
                    itype,
                    ctypes.c_void_p,
                    itype,
                ]
                return fn
    return False


def axpy(a: float, x, y) -> None:
    """``y += a * x`` in place in one fused pass, with numpy's own BLAS (cblas_saxpy).

    Updaters touch every parameter every step; one fused pass is several times faster than
    numpy's ``x * a`` then ``y += ...`` and allocates nothing. (scipy's BLAS is avoided on
    purpose: it is a second OpenBLAS whose spinning threads slow down numpy's GEMMs.)
    """
    import numpy as np

    global _saxpy
    if _saxpy is None:
        _saxpy = _find_saxpy()
    if (
        _saxpy
        and x.dtype == np.float32
        and y.dtype == np.float32
        and x.flags.c_contiguous
        and y.flags.c_contiguous
        and x.size == y.size
    ):
        _saxpy(x.size, a, x.ctypes.data, 1, y.ctypes.data, 1)
    else:
        y += np.float32(a) * x
