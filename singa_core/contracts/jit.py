"""Host passes compiled with numba on first use (optional: the ``fast`` extra).

A module with compiled host passes holds one :class:`Compiled` made from the function that
compiles them (importing numba inside it); :meth:`Compiled.get` gives what that function
returned, compiling once per process, or None where numba is not installed or
``SINGA_NUMBA=0`` is set (then numpy's paths run); :meth:`Compiled.available` says whether
``get`` would give them without compiling now (for memory estimates made at set-up).

Threaded passes: a compiled pass with parallel loops (``numba.prange``) runs on
:func:`host_threads` threads, as many as the BLAS runs, so that a step's element-wise passes
use the cores its GEMMs use. :func:`parallel_ready` chooses a thread pool that callers in
several threads may share (OpenMP's or TBB's, unless the user set
``NUMBA_THREADING_LAYER``) and says whether there is one; :func:`threaded` wraps a compiled
function so that it sets the pool's size before each call. Each thread computes its own
elements with the same operations as a serial loop, so the results do not depend on the
thread count.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Callable

from singa_core.contracts import sgemm
from singa_core.contracts.cache_keys import pin_identities
from singa_core.contracts.openblas import openblas_threads

__all__ = [
    "Compiled",
    "enabled",
    "host_threads",
    "parallel_ready",
    "serial_or_split",
    "threaded",
    "use_host_threads",
]


def enabled() -> bool:
    """False where ``SINGA_NUMBA=0`` turns every compiled pass off."""
    return os.environ.get("SINGA_NUMBA", "1").strip() != "0"


class Compiled:
    """The result of ``build()`` (numba's compiled functions), made on first use."""

    def __init__(self, build: Callable[[], object]) -> None:
        self._build = build
        self._made: object = None  # not yet tried; then build()'s result, or False

    def get(self):
        """``build()``'s result, or None (numba missing, or ``SINGA_NUMBA=0``)."""
        if not enabled():
            return None
        if self._made is None:
            try:
                self._made = self._build()
            except ImportError:
                self._made = False
            # before the first call computes a cache key with them (cache_keys.py)
            pin_identities(self._made)
        return self._made or None

    def available(self) -> bool:
        """Whether :meth:`get` gives the compiled passes, without compiling them now."""
        if not enabled():
            return False
        if self._made is not None:
            return bool(self._made)
        return importlib.util.find_spec("numba") is not None


def _probe(a):
    return (a + a.dtype.type(1.0)).sum()  # an array expression: run on the thread pool


def _parallel_build() -> bool:
    import numba
    import numpy as np

    # the passes' parallel loops need a pool that callers in several threads may share
    # (OpenMP's or TBB's); a user's NUMBA_THREADING_LAYER is theirs to choose
    if "NUMBA_THREADING_LAYER" not in os.environ:
        numba.config.THREADING_LAYER = "threadsafe"
    probe = numba.njit(cache=True, parallel=True)(_probe)
    try:
        probe(np.zeros(2, dtype=np.float32))
    except (ValueError, ImportError):  # no such pool here: the serial passes
        return False
    return True


_PARALLEL = Compiled(_parallel_build)


def parallel_ready() -> bool:
    """Whether compiled passes may use parallel loops: numba is here, not turned off, and
    has a thread pool that several calling threads may share (chosen here, once)."""
    return bool(_PARALLEL.get())


#: the threads OpenBLAS's GEMMs are cut over on numba's pool (1: not cut), set by
#: :func:`singa_core.contracts.sgemm_split.use`
_gemm_pool_threads = 1


def gemms_on_pool(threads: int) -> None:
    """The host's GEMMs now run on ``threads`` threads of numba's pool (1: they do not):
    :mod:`singa_core.contracts.sgemm_split` says so when it turns the cut on or off."""
    global _gemm_pool_threads
    _gemm_pool_threads = max(1, int(threads))


def host_threads() -> int:
    """The threads the compiled host passes run on: as many as the BLAS runs
    (``num_openblas_threads`` and the like; one where the user asked for one), at most
    numba's pool, but one where the host's SGEMM is OpenBLAS running its own threads, whose
    workers keep spinning after each GEMM: a second thread of ours then only competes with
    them (measured, CIFAR-10 at 2 threads on OpenBLAS: 136-157 ms/step against 76-83 with
    one). Where OpenBLAS's GEMMs are cut over this same pool instead
    (:mod:`~singa_core.contracts.sgemm_split`), the passes use as many threads."""
    lib = sgemm._chosen or sgemm.chosen()
    if lib is not None and lib.name == "openblas":
        return _gemm_pool_threads
    try:
        import numba
    except ImportError:
        return 1
    return max(1, min(openblas_threads() or 1, numba.config.NUMBA_NUM_THREADS))


_pool_size = threading.local()  # the count this thread last gave numba.set_num_threads


def use_threads(n: int) -> int:
    """numba's parallel loops called from this thread on ``n`` threads (returned). Set
    only when it changes: numba's own check costs about 7 µs a call, and a GRU step makes
    hundreds of such calls (a different count set behind its back changes the speed of a
    split pass, never its values)."""
    if getattr(_pool_size, "n", None) != n:
        import numba

        numba.set_num_threads(n)
        _pool_size.n = n
    return n


def use_host_threads() -> int:
    """numba's parallel loops on :func:`host_threads` threads (returned)."""
    return use_threads(host_threads())


def threaded(fn):
    """``fn`` (compiled, with parallel loops) run on :func:`host_threads` threads."""

    def run(*args):
        use_host_threads()
        return fn(*args)

    run.compiled = fn
    return run


def serial_or_split(serial, split, size: int, minimum: int, *args) -> None:
    """Run a pass given in two forms: ``split(*args, parts)``, its work cut into ``parts``
    runs of the serial loop, one a thread, where there is a split form, at least
    ``minimum`` values (``size``) and more than one host thread; else ``serial(*args)``.
    Both give the same values, so the choice is speed alone."""
    if split is not None and size >= minimum and host_threads() > 1:
        split(*args, use_host_threads())
    else:
        serial(*args)
