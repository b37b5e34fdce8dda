"""Stable disk-cache keys for numba functions that call other compiled functions.

numba keeps compiled code on disk (``cache=True``) under a key made of the function's
bytecode and a pickle of the values its closure captured. A compiled function that calls
another compiled function or an intrinsic defined beside it (singa's kernels are defined
inside the ``build()`` of a :class:`singa_core.contracts.jit.Compiled`, so they capture each
other) captures that object, and numba pickles a dispatcher or an intrinsic with an
identity (a ``uuid``) drawn at random in each process. So its key differed in every
process: the cache never hit, every process compiled again (RBM1's first step took 3 s
more, CIFAR-10's LRN passes 1-2 s) and every process added entries to the cache (measured
after some weeks of tests: 2,300 files, 180 MB beside the sources).

:func:`pin_identities` gives each dispatcher and intrinsic reachable from a ``build()``'s
result an identity derived from what it is instead: its module, qualified name and
bytecode, and the values its own closure captured (those compiled objects first, so their
identities are already fixed). Two processes building the same kernels then make the same
keys and the second one loads the first one's code. Kernels built with other captured
values (another vector width, another count of rows) still get other identities and keys.

It relies on two numba internals (the ``_set_uuid`` method and the private attribute that
holds the identity); where a numba version lacks them, nothing is pinned and the cache
behaves as before: correct, only slower to start.
"""

from __future__ import annotations

import hashlib
import types

__all__ = ["pin_identities"]

# the private attribute each class keeps its identity in (name-mangled), by class name
_UUID_ATTRIBUTES = ("_MemoMixin__uuid", "_Intrinsic__uuid")


def _compiled_kinds() -> tuple[type, ...]:
    from numba.core.dispatcher import Dispatcher
    from numba.core.extending import _Intrinsic

    return Dispatcher, _Intrinsic


def _identity_of(obj) -> str | None:
    for attr in _UUID_ATTRIBUTES:
        if hasattr(obj, attr):
            return getattr(obj, attr)
    raise AttributeError("no identity attribute")


def _python_function(obj):
    return getattr(obj, "py_func", None) or getattr(obj, "_defn", None)


def _captured(fn) -> list:
    return [cell.cell_contents for cell in (getattr(fn, "__closure__", None) or ())]


def _pin(obj, kinds, seen: set[int]) -> None:
    if id(obj) in seen:
        return
    seen.add(id(obj))
    fn = _python_function(obj)
    if fn is None:
        return
    for value in _captured(fn):  # what it calls first: their identities enter its digest
        _walk(value, kinds, seen)
    if _identity_of(obj) is not None:  # already drawn (used before, or pinned)
        return
    from numba.core.serialize import dumps

    digest = hashlib.sha256()
    digest.update(f"{fn.__module__}:{fn.__qualname__}".encode())
    digest.update(fn.__code__.co_code)
    try:
        digest.update(dumps(tuple(_captured(fn))))
    except Exception:  # noqa: BLE001 - a value that does not pickle: numba's key cannot
        return  # use it either; this object keeps a random identity (no cache, as before)
    obj._set_uuid(f"singa-{digest.hexdigest()[:32]}")


def _walk(value, kinds, seen: set[int]) -> None:
    if isinstance(value, kinds):
        _pin(value, kinds, seen)
    elif callable(value) and hasattr(value, "__code__"):  # a plain function: a wrapper
        if id(value) not in seen:
            seen.add(id(value))
            for captured in _captured(value):
                _walk(captured, kinds, seen)
    elif isinstance(value, (tuple, list)):
        for item in value:
            _walk(item, kinds, seen)
    elif isinstance(value, dict):
        for item in value.values():
            _walk(item, kinds, seen)
    elif (
        hasattr(value, "__dict__")
        and not isinstance(value, (type, types.ModuleType))
        and id(value) not in seen
    ):
        seen.add(id(value))  # a namespace of kernels
        for item in vars(value).values():
            _walk(item, kinds, seen)


def pin_identities(built) -> bool:
    """Fix the identities of the compiled functions reachable from ``built`` (attributes,
    items, wrappers' closures) before numba first computes a key with them. False where
    this numba has not the internals it needs (nothing is changed then)."""
    try:
        kinds = _compiled_kinds()
        _walk(built, kinds, set())
    except (ImportError, AttributeError, AssertionError):
        return False
    return True
