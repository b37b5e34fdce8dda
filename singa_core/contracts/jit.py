"""Host passes compiled with numba on first use (optional: the ``fast`` extra).

A module with compiled host passes holds one :class:`Compiled` made from the function that
compiles them (importing numba inside it); :meth:`Compiled.get` gives what that function
returned, compiling once per process, or None where numba is not installed or
``SINGA_NUMBA=0`` is set (then numpy's paths run); :meth:`Compiled.available` says whether
``get`` would give them without compiling now (for memory estimates made at set-up).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable

__all__ = ["Compiled", "enabled"]


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
        return self._made or None

    def available(self) -> bool:
        """Whether :meth:`get` gives the compiled passes, without compiling them now."""
        if not enabled():
            return False
        if self._made is not None:
            return bool(self._made)
        return importlib.util.find_spec("numba") is not None
