"""numpy's own float32 ``exp`` and ``tanh`` loops, called from compiled (numba) passes.

A compiled host pass keeps numpy's bits by doing what the numpy path does with the same
float32 operations in the same order (:mod:`singa_core.contracts.jit`). ``exp`` and ``tanh``
were the exceptions: numba's come from the C library, whose last bits differ from numpy's
vectorised ones, so a pass stopped before them and numpy ran them, alone and on one
thread, between two compiled passes (a sigmoid: five passes over memory, the ``exp`` on
one core while the others waited).

Here a pass calls numpy's loop itself: the inner loop of the ``np.exp`` (``np.tanh``)
ufunc for float32, found in the ufunc's C structure (``PyUFuncObject``'s ``functions``
and ``data``, numpy's public C API), called on a contiguous block of the pass's own
(``call_unary(fn, data, src, dst, n)`` in a compiled function). The same code runs on the
same values as ``np.exp(x, out=x)``, so the bits are numpy's; the pass can run it on each
thread's block of rows, between its own arithmetic, while the values are in cache.

The loop is used only when it can be trusted: the structure read must name the ufunc,
its arity and its type list as the ufunc object reports them, and the loop must give
``np.exp``'s (``np.tanh``'s) bits on a probe of 8,203 values (the limits of float32, both
zeros, infinities, NaN, a spread of normal numbers). Otherwise :func:`loop` says None
and the caller keeps numpy's path. numpy's floating-point warnings are not raised from a
compiled pass (there are none to raise in a sigmoid: ``exp`` of a large negative value
overflows to the right limit, as the numpy paths allow with ``errstate(over="ignore")``).
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np

__all__ = ["UNARY", "call_unary_intrinsic", "loop"]

#: the unary float32 loops this module finds
UNARY = ("exp", "tanh")

_lock = threading.Lock()
_found: dict[str, tuple[int, int] | None] = {}

# PyUFuncObject after PyObject_HEAD (numpy/ufuncobject.h, numpy 1.x and 2.x alike):
# int nin, nout, nargs, identity; PyUFuncGenericFunction *functions; void **data;
# int ntypes, reserved1; const char *name; const char *types; ...
_HEAD = ctypes.sizeof(ctypes.c_ssize_t) + ctypes.sizeof(ctypes.c_void_p)
_PTR = ctypes.sizeof(ctypes.c_void_p)
_INT = ctypes.sizeof(ctypes.c_int)
_FUNCTIONS = _HEAD + 4 * _INT
_DATA = _FUNCTIONS + _PTR
_NTYPES = _DATA + _PTR
_NAME = _NTYPES + 2 * _INT
_TYPES = _NAME + _PTR

_LOOP = ctypes.CFUNCTYPE(
    None,
    ctypes.POINTER(ctypes.c_void_p),
    ctypes.POINTER(ctypes.c_ssize_t),
    ctypes.POINTER(ctypes.c_ssize_t),
    ctypes.c_void_p,
)


def _read(ufunc) -> tuple[int, int] | None:
    """(loop, data) of ``ufunc``'s float32 -> float32 loop, from its C structure."""
    base = id(ufunc)

    def ptr(offset: int) -> int:
        return ctypes.c_void_p.from_address(base + offset).value or 0

    def integer(offset: int) -> int:
        return ctypes.c_int.from_address(base + offset).value

    arity = tuple(integer(_HEAD + k * _INT) for k in range(3))
    if arity != (ufunc.nin, ufunc.nout, ufunc.nargs) or arity != (1, 1, 2):
        return None
    ntypes = integer(_NTYPES)
    if ntypes != ufunc.ntypes or not ptr(_NAME) or not ptr(_TYPES) or not ptr(_FUNCTIONS):
        return None
    if ctypes.string_at(ptr(_NAME)).decode(errors="replace") != ufunc.__name__:
        return None
    codes = ctypes.string_at(ptr(_TYPES), ntypes * 2)
    wanted = f"{np.dtype(np.float32).char}->{np.dtype(np.float32).char}"
    if wanted not in ufunc.types:
        return None
    f32 = np.dtype(np.float32).num
    for i in range(ntypes):
        if codes[2 * i] == f32 and codes[2 * i + 1] == f32:
            fn = ctypes.c_void_p.from_address(ptr(_FUNCTIONS) + i * _PTR).value
            data = ctypes.c_void_p.from_address(ptr(_DATA) + i * _PTR).value if ptr(_DATA) else 0
            return (fn, data or 0) if fn else None
    return None


def _probe() -> np.ndarray:
    f = np.finfo(np.float32)
    edges = [0.0, -0.0, f.tiny, -f.tiny, f.smallest_subnormal, -f.smallest_subnormal,
             f.max, -f.max, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, 88.72, 88.73, -87.33,
             -103.97, -104.0, 9.0, -9.0]  # fmt: skip
    spread = np.random.default_rng(0).standard_normal(8000) * np.geomspace(1e-6, 120, 8000)
    grid = np.linspace(-20, 20, 182)
    return np.concatenate([edges, spread, grid]).astype(np.float32)


def _agrees(name: str, fn: int, data: int) -> bool:
    """The loop at ``fn`` gives ``np.<name>``'s bits on the probe (out of place and in
    place)."""
    x = _probe()
    with np.errstate(all="ignore"):
        want = getattr(np, name)(x)
    loop_fn = _LOOP(fn)
    for inplace in (False, True):
        src = x.copy()
        dst = src if inplace else np.empty_like(src)
        args = (ctypes.c_void_p * 2)(src.ctypes.data, dst.ctypes.data)
        dims = (ctypes.c_ssize_t * 1)(src.size)
        steps = (ctypes.c_ssize_t * 2)(4, 4)
        loop_fn(args, dims, steps, data or None)
        same = want.view(np.uint32) == dst.view(np.uint32)
        same |= np.isnan(want) & np.isnan(dst)
        if not same.all():
            return False
    return True


def loop(name: str) -> tuple[int, int] | None:
    """(function address, data) of numpy's float32 loop for ``np.<name>`` (one of
    :data:`UNARY`), checked (the module doc); None where it cannot be trusted."""
    if name not in UNARY:
        raise ValueError(f"no numpy loop '{name}' here (known: {', '.join(UNARY)})")
    with _lock:
        if name not in _found:
            try:
                found = _read(getattr(np, name))
                _found[name] = found if found and _agrees(name, *found) else None
            except (OSError, ValueError, AttributeError):
                _found[name] = None
        return _found[name]


def call_unary_intrinsic():
    """A numba intrinsic ``call_unary(fn, data, src, dst, n)``: numpy's loop at address
    ``fn`` (with its ``data``) on ``n`` contiguous float32 values from address ``src`` to
    ``dst`` (the same address: in place). Import numba's pieces only when called (inside a
    :class:`~singa_core.contracts.jit.Compiled` build)."""
    from llvmlite import ir
    from numba import types
    from numba.extending import intrinsic

    @intrinsic
    def call_unary(typingctx, fn, data, src, dst, n):
        sig = types.void(fn, data, src, dst, n)

        def codegen(context, builder, signature, args):
            i8p, i64 = ir.IntType(8).as_pointer(), ir.IntType(64)
            fnty = ir.FunctionType(
                ir.VoidType(), [i8p.as_pointer(), i64.as_pointer(), i64.as_pointer(), i8p]
            )
            with builder.goto_entry_block():
                argv = builder.alloca(i8p, size=ir.Constant(i64, 2))
                dims = builder.alloca(i64)
                steps = builder.alloca(i64, size=ir.Constant(i64, 2))
            builder.store(builder.inttoptr(args[2], i8p), argv)
            builder.store(builder.inttoptr(args[3], i8p), builder.gep(argv, [ir.Constant(i64, 1)]))
            builder.store(args[4], dims)
            builder.store(ir.Constant(i64, 4), steps)
            builder.store(ir.Constant(i64, 4), builder.gep(steps, [ir.Constant(i64, 1)]))
            call = builder.inttoptr(args[0], fnty.as_pointer())
            builder.call(call, [argv, dims, steps, builder.inttoptr(args[1], i8p)])
            return context.get_dummy_value()

        return sig, codegen

    return call_unary
