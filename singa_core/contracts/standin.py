"""The stand-in device array module: the CPU behaving as a GPU's array library would.

CI has no GPU, yet every layer, updater and worker must compute through its device's array
module and never fall back to numpy on device arrays. This module is an array library with
CuPy's rules, computed by numpy on the host:

* its arrays (:class:`StandinArray`) refuse implicit conversion to numpy (``np.asarray``,
  the buffer protocol, ``ctypes``, ``tobytes``), as CuPy's do: moving data to or from the
  host must be said (``device.asarray`` / ``device.to_host``, or ``.get()``);
* mixing a numpy array into an operation on device arrays is a ``TypeError`` (numpy
  functions and ufuncs reach the stand-in through NEP-13/NEP-18 dispatch, as they reach
  CuPy, so ``np.dot(device_x, host_w)`` fails here exactly where it would on a GPU);
* indexing one element and reductions give 0-d device arrays, not numpy scalars, as CuPy
  does: ``np.float32(x[i])`` is refused, ``float(x[i])`` is the explicit read;
* everything else (views, ``out=`` arguments, in-place operators) behaves as numpy does,
  over the same memory.

A layer that passes its checks on the stand-in (``singa train --device standin``, or the
author's kit under ``using_device(standin_device())``) keeps its arrays on the device. It is
slow (a Python wrapper around every array): a test device, not a way to train.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import sys
import threading
import types
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

REFUSAL = (
    "implicit conversion of a device array to a numpy array is not allowed "
    "(move it explicitly: device.to_host(x), or x.get())"
)


def _host_refusal(x) -> TypeError:
    return TypeError(
        f"a numpy array {x.dtype}{tuple(x.shape)} was mixed with device arrays: create it "
        "with the device's array module (layer.xp / device.xp) or move it with "
        "device.asarray()"
    )


class StandinArray:
    """A device array of the stand-in module (a numpy array it keeps to itself)."""

    __slots__ = ("_a",)
    __array_priority__ = 1000.0
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, a: np.ndarray) -> None:
        self._a = a
        if _graph is not None and a.base is None:  # new device memory (a capture refuses it)
            _fresh.n = getattr(_fresh, "n", 0) + 1

    # -- no silent way to the host -------------------------------------------------------
    def __array__(self, *args, **kwargs):
        raise TypeError(REFUSAL)

    def get(self, *args, **kwargs) -> np.ndarray:
        """An explicit copy to the host (CuPy's ``ndarray.get``)."""
        return _op("get", lambda: np.array(self._a, copy=True))

    def set(self, arr, *args, **kwargs) -> None:
        """An explicit copy from the host into this array (CuPy's ``ndarray.set``: same
        shape, a C-contiguous target)."""
        if not self._a.flags.c_contiguous:
            raise ValueError("set() needs a C-contiguous device array")
        _op("set", lambda: np.copyto(self._a, np.asarray(arr).reshape(self._a.shape)))

    # -- attributes ----------------------------------------------------------------------
    @property
    def shape(self):
        return self._a.shape

    @shape.setter
    def shape(self, value):
        self._a.shape = value

    @property
    def dtype(self):
        return self._a.dtype

    @property
    def ndim(self):
        return self._a.ndim

    @property
    def size(self):
        return self._a.size

    @property
    def nbytes(self):
        return self._a.nbytes

    @property
    def itemsize(self):
        return self._a.itemsize

    @property
    def strides(self):
        return self._a.strides

    @property
    def flags(self):
        return self._a.flags

    @property
    def T(self):
        return _op("T", lambda: StandinArray(self._a.T), (self,))

    @property
    def base(self):
        b = self._a.base
        return StandinArray(b) if isinstance(b, np.ndarray) else b

    def __getattr__(self, name):
        if name in _REFUSED_ATTRIBUTES:
            raise AttributeError(
                f"a device array has no {name!r} (the host cannot address device memory: "
                "device.to_host(x) first)"
            )
        attr = getattr(self._a, name)
        if callable(attr):

            def method(*args, **kwargs):
                _refuse_host(args, kwargs)

                def run():
                    result = attr(*_unwrap(args), **_unwrap(kwargs))
                    out = kwargs.get("out")
                    return out if out is not None else _wrap(result)

                return _op(name, run, (self,))

            method.__name__ = name
            return method
        return _wrap(attr)

    # -- indexing ------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._a)

    def __iter__(self):
        for item in self._a:
            yield _wrap(item)

    def __getitem__(self, key):
        key = _key(key)

        def run():
            item = self._a[key]
            if isinstance(item, np.generic):  # one element: a 0-d view, as CuPy gives
                item = self._a[(*key, Ellipsis) if isinstance(key, tuple) else (key, Ellipsis)]
            return _wrap(item)

        return _op("getitem", run, (self,))

    def __setitem__(self, key, value):
        _refuse_host((value,), {})
        key = _key(key)

        def run():
            self._a[key] = _unwrap(value)

        _op("setitem", run)

    # -- dispatch of numpy's functions and ufuncs ----------------------------------------
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        _refuse_host(inputs, kwargs)
        out = kwargs.get("out")

        def run():
            result = getattr(ufunc, method)(*_unwrap(inputs), **_unwrap(kwargs))
            if out is not None:
                return out[0] if isinstance(out, tuple) and len(out) == 1 else out
            return _wrap(result)

        name = ufunc.__name__ if method == "__call__" else f"{ufunc.__name__}.{method}"
        return _op(name, run)

    def __array_function__(self, func, types, args, kwargs):
        _refuse_host(args, kwargs)
        _refuse_unsupported(func.__name__, kwargs)

        def run():
            result = func(*_unwrap(args), **_unwrap(kwargs))
            out = kwargs.get("out")
            return out if out is not None else _wrap(result)

        return _op(func.__name__, run, args)

    # -- scalars (a synchronising read, as on a GPU) -------------------------------------
    def __bool__(self) -> bool:
        return _op("__bool__", lambda: bool(self._a))

    def __float__(self) -> float:
        return _op("__float__", lambda: float(self._a))

    def __int__(self) -> int:
        return _op("__int__", lambda: int(self._a))

    def __index__(self) -> int:
        return _op("__index__", lambda: self._a.__index__())

    def __complex__(self) -> complex:
        return _op("__complex__", lambda: complex(self._a))

    def __repr__(self) -> str:
        return f"standin({self._a!r})"

    def __copy__(self):
        return _op("copy", lambda: StandinArray(self._a.copy()))

    def __deepcopy__(self, memo):
        return _op("copy", lambda: StandinArray(self._a.copy()))

    def __reduce__(self):
        raise TypeError("device arrays are not pickled: device.to_host(x) first")


_REFUSED_ATTRIBUTES = frozenset(
    {"ctypes", "tobytes", "tofile", "tostring", "data", "__array_interface__",
     "__array_struct__", "__buffer__", "dump", "dumps"}
)  # fmt: skip


def _binary(ufunc):
    def op(self, other):
        return ufunc(self, other)

    def rop(self, other):
        return ufunc(other, self)

    def iop(self, other):
        ufunc(self, other, out=self)
        return self

    return op, rop, iop


for _name, _uf in {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "truediv": np.true_divide,
    "floordiv": np.floor_divide, "mod": np.remainder, "pow": np.power,
    "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor,
    "lshift": np.left_shift, "rshift": np.right_shift, "matmul": np.matmul,
}.items():  # fmt: skip
    _op, _rop, _iop = _binary(_uf)
    setattr(StandinArray, f"__{_name}__", _op)
    setattr(StandinArray, f"__r{_name}__", _rop)
    if _name != "matmul":
        setattr(StandinArray, f"__i{_name}__", _iop)
for _name, _uf in {
    "lt": np.less, "le": np.less_equal, "eq": np.equal, "ne": np.not_equal,
    "gt": np.greater, "ge": np.greater_equal,
}.items():  # fmt: skip
    setattr(StandinArray, f"__{_name}__", _binary(_uf)[0])
for _name, _uf in {"neg": np.negative, "pos": np.positive, "abs": np.absolute,
                   "invert": np.invert}.items():  # fmt: skip
    setattr(StandinArray, f"__{_name}__", lambda self, _uf=_uf: _uf(self))


# -- counting: what a GPU would be asked to do -----------------------------------------------
#: calls that read a device value on the host: on a GPU each waits for the device (a stall)
READS = frozenset(
    {"get", "item", "tolist", "__bool__", "__float__", "__int__", "__index__", "__complex__"}
)
#: calls that copy host data to the device
TO_DEVICE = frozenset({"to_device", "set"})
#: allocations without a kernel (CuPy's ``empty`` takes memory from its pool, nothing runs)
ALLOCATIONS = frozenset({"empty", "empty_like"})
#: calls that give a view when their result shares the input's memory (no kernel then)
VIEW_CANDIDATES = frozenset(
    {"reshape", "ravel", "transpose", "T", "getitem", "swapaxes", "squeeze", "expand_dims",
     "view", "as_strided", "sliding_window_view", "moveaxis", "broadcast_to", "diagonal",
     "ascontiguousarray", "asarray", "real", "imag", "atleast_1d", "atleast_2d", "rollaxis"}
)  # fmt: skip


@dataclass
class Counts:
    """What the stand-in was asked to do while :func:`counting` was on: ``kernels`` (each a
    launch on a GPU), ``views`` (no device work), ``reads`` (device values read on the host:
    each a synchronisation), ``to_device`` (host-to-device copies), ``allocations``; and
    each kernel, read and copy by name (``by_name``)."""

    kernels: int = 0
    views: int = 0
    reads: int = 0
    to_device: int = 0
    allocations: int = 0
    by_name: Counter = field(default_factory=Counter)

    def record(self, name: str, kind: str) -> None:
        setattr(self, kind, getattr(self, kind) + 1)
        if kind != "views":
            self.by_name[f"{kind}:{name}"] += 1

    def as_dict(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in ("kernels", "views", "reads", "to_device",
                                               "allocations")}  # fmt: skip


_counts: Counts | None = None
_depth = threading.local()
#: the graph being captured (singa_core.contracts.capture sets it: it has ``refuse(call,
#: what)`` giving the error to raise and ``record(name, kind, run, launches, keep)``)
_graph = None
_fresh = threading.local()  # arrays owning new memory made by this thread (while capturing)


@contextlib.contextmanager
def counting() -> Iterator[Counts]:
    """Count every call into the stand-in for the block (any thread). A call the stand-in
    makes into itself while serving one (a ufunc's own dispatch) is not counted again."""
    global _counts
    prev, _counts = _counts, Counts()
    try:
        yield _counts
    finally:
        _counts = prev


def record(name: str, kind: str) -> None:
    """Count one ``kind`` of work (``kernels``, ``reads``, ``to_device``) where it happens
    outside the array module: the emulated CUDA runtime's launches, GEMMs and uploads
    (:mod:`singa_core.contracts.cuda`)."""
    counts = _counts
    if counts is not None and not getattr(_depth, "n", 0):
        counts.record(name, kind)


def run_node(name: str, kind: str, run, keep=()) -> None:
    """Run one piece of device work made outside the array module (an emulated launch, a
    GEMM, a table upload): counted as ``kind``, and recorded as a node while capturing
    (``keep``: the arrays its raw pointers point into)."""
    graph = _graph
    if graph is not None and not getattr(_depth, "n", 0):
        if kind != "kernels":
            raise graph.refuse(name, "upload a new table to the device (an allocation)")
        graph.record(name, kind, run, 1, tuple(keep))
    record(name, kind)
    run()


@contextlib.contextmanager
def capturing_calls(graph) -> Iterator[None]:
    """Within the block, stand-in calls are checked and recorded by ``graph``
    (:func:`singa_core.contracts.capture.capturing` enters it)."""
    global _graph
    _graph = graph
    try:
        yield
    finally:
        _graph = None


@contextlib.contextmanager
def replaying() -> Iterator[None]:
    """Running a graph's nodes: the calls inside them are neither counted nor recorded
    (the graph counts each node once)."""
    _depth.n = 1
    try:
        yield
    finally:
        _depth.n = 0


# -- which code the stand-in runs ------------------------------------------------------------
_cuda_path: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "singa_standin_cuda_path", default=False
)


@contextlib.contextmanager
def running_cuda_code(on: bool = True) -> Iterator[None]:
    """Within the block, kernels on stand-in arrays run their CUDA implementation through
    the emulated runtime (the ``standin:cuda`` device: ``Device.activate`` enters it)
    instead of their host implementation."""
    token = _cuda_path.set(on)
    try:
        yield
    finally:
        _cuda_path.reset(token)


def runs_cuda_code() -> bool:
    """Whether the calling context runs kernels' CUDA code (see :func:`running_cuda_code`)."""
    return _cuda_path.get()


def _classify(name: str, result, inputs) -> str:
    if name in READS:
        return "reads"
    if name in TO_DEVICE:
        return "to_device"
    if name in ALLOCATIONS:
        return "allocations"
    if name in VIEW_CANDIDATES and isinstance(result, StandinArray):
        for x in inputs:
            if isinstance(x, StandinArray) and np.may_share_memory(result._a, x._a):
                return "views"
    return "kernels"


def _op(name: str, run, inputs=(), *, launches: int | None = None):
    """Run one stand-in call, counted when :func:`counting` is on (``launches``: a
    kernel's launches, instead of classifying the call) and checked and recorded while
    capturing (:mod:`singa_core.contracts.capture`)."""
    counts, graph = _counts, _graph
    if (counts is None and graph is None) or getattr(_depth, "n", 0):
        return run()
    if graph is not None and name in READS:
        raise graph.refuse(name, "read a device value on the host")
    fresh = getattr(_fresh, "n", 0)
    _depth.n = 1
    try:
        result = run()
    finally:
        _depth.n = 0
    kind = "kernels" if launches is not None else _classify(name, result, inputs)
    if graph is not None:
        _capture(graph, name, kind, run, launches, getattr(_fresh, "n", 0) != fresh)
    if counts is None:
        return result
    if launches is None:
        counts.record(name, kind)
    for _ in range(launches or 0):
        counts.record(name, "kernels")
    return result


def _capture(graph, name: str, kind: str, run, launches, allocated: bool) -> None:
    if kind == "views":
        return  # no device work
    if kind == "allocations" or allocated:
        raise graph.refuse(name, "allocate device memory")
    graph.record(name, kind, run, 1 if launches is None else launches, ())


def launcher(name: str, host_fn, launches: int = 1):
    """A kernel's host implementation run on stand-in arrays as ``launches`` counted
    launches (what its CUDA implementation costs on a GPU): device arrays among the
    arguments (in lists and tuples too) are handed over as their numpy arrays, host arrays
    are refused, and arrays it returns come back as device arrays."""

    def run(*args, **kwargs):
        _refuse_host(args, kwargs)
        return _op(
            name, lambda: _wrap(host_fn(*_unwrap(args), **_unwrap(kwargs))), launches=launches
        )

    run.__name__ = name
    return run


# -- wrapping and unwrapping --------------------------------------------------------------
def _wrap(x):
    if isinstance(x, np.ndarray):
        return StandinArray(x)
    if isinstance(x, np.generic):  # CuPy gives 0-d device arrays where numpy gives scalars
        return StandinArray(np.asarray(x))
    if isinstance(x, tuple):
        return tuple(_wrap(v) for v in x)
    if isinstance(x, list):
        return [_wrap(v) for v in x]
    return x


def _unwrap(x):
    if isinstance(x, StandinArray):
        return x._a
    if isinstance(x, tuple):
        return tuple(_unwrap(v) for v in x)
    if isinstance(x, list):
        return [_unwrap(v) for v in x]
    if isinstance(x, dict):
        return {k: _unwrap(v) for k, v in x.items()}
    if dataclasses.is_dataclass(x) and not isinstance(x, type):  # an updater's UpdateItem
        return dataclasses.replace(
            x, **{f.name: _unwrap(getattr(x, f.name)) for f in dataclasses.fields(x) if f.init}
        )
    return x


def _refuse_host(args, kwargs) -> None:
    """A TypeError when a numpy array (not a numpy scalar) is among the operands."""
    stack = [*args, *kwargs.values()]
    while stack:
        x = stack.pop()
        if isinstance(x, np.ndarray):
            raise _host_refusal(x)
        if isinstance(x, (tuple, list)):
            stack.extend(x)


#: arguments numpy's functions take and CuPy's do not (CuPy 14): the stand-in refuses them
#: too, so a layer using one fails in CI as it would on a GPU
CUPY_UNSUPPORTED = {
    "einsum": ("out", "order", "casting"),
    "take": ("mode",),
}


def _refuse_unsupported(name: str, kwargs) -> None:
    bad = [k for k in CUPY_UNSUPPORTED.get(name, ()) if kwargs.get(k) is not None]
    if bad:
        raise TypeError(
            f"{name}() on device arrays takes no {', '.join(bad)} argument (CuPy's does not)"
        )


def _key(key):
    if isinstance(key, np.ndarray):
        raise _host_refusal(key)
    if isinstance(key, tuple):
        for k in key:
            if isinstance(k, np.ndarray):
                raise _host_refusal(k)
    return _unwrap(key)


# -- the module namespace (what ``device.xp`` is) -----------------------------------------
class _Ufunc:
    """A numpy ufunc as the stand-in module exposes it: host arrays refused."""

    def __init__(self, uf) -> None:
        self._uf = uf
        self.__name__ = uf.__name__

    def __call__(self, *args, **kwargs):
        _refuse_host(args, kwargs)
        return _op(self.__name__, lambda: _wrap(self._uf(*args, **kwargs)))

    def __getattr__(self, name):
        attr = getattr(self._uf, name)
        if not callable(attr):
            return attr

        def method(*args, **kwargs):
            _refuse_host(args, kwargs)
            return _op(f"{self.__name__}.{name}", lambda: _wrap(attr(*args, **kwargs)))

        return method


def _function(fn):
    name = getattr(fn, "__name__", "function")

    def call(*args, **kwargs):
        _refuse_host(args, kwargs)
        _refuse_unsupported(name, kwargs)
        return _op(name, lambda: _wrap(fn(*args, **kwargs)), args)

    call.__name__ = name
    return call


def asarray(x, dtype=None, order=None, **kwargs):
    """Host data to the device (a copy), or a device array as it is (CuPy's asarray)."""
    if isinstance(x, StandinArray):
        return x if dtype is None or x.dtype == dtype else x.astype(dtype)
    return _op(
        "to_device", lambda: StandinArray(np.array(x, dtype=dtype, order=order or "K", copy=True))
    )


def array(x, dtype=None, copy=True, order="K", **kwargs):
    if isinstance(x, StandinArray):
        return _op(
            "copy", lambda: StandinArray(np.array(x._a, dtype=dtype, copy=copy, order=order))
        )
    return _op("to_device", lambda: StandinArray(np.array(x, dtype=dtype, order=order, copy=True)))


def ascontiguousarray(x, dtype=None):
    if isinstance(x, StandinArray):
        return _op(
            "ascontiguousarray",
            lambda: StandinArray(np.ascontiguousarray(x._a, dtype=dtype)),
            (x,),
        )
    return _op(
        "to_device",
        lambda: StandinArray(np.ascontiguousarray(np.array(x, dtype=dtype, copy=True))),
    )


def asnumpy(x, **kwargs) -> np.ndarray:
    """A device array to the host (a copy); host data as it is."""
    return x.get() if isinstance(x, StandinArray) else np.asarray(x)


def get_array_module(*arrays):
    return sys.modules[__name__] if any(isinstance(a, StandinArray) for a in arrays) else np


ndarray = StandinArray


def _as_strided(x, shape=None, strides=None, **kwargs):
    if not isinstance(x, StandinArray):
        raise _host_refusal(np.asarray(x))
    return _op(
        "as_strided",
        lambda: StandinArray(np.lib.stride_tricks.as_strided(x._a, shape, strides, **kwargs)),
        (x,),
    )


def _sliding_window_view(x, *args, **kwargs):
    if not isinstance(x, StandinArray):
        raise _host_refusal(np.asarray(x))
    return _op(
        "sliding_window_view",
        lambda: StandinArray(np.lib.stride_tricks.sliding_window_view(x._a, *args, **kwargs)),
        (x,),
    )


lib = types.SimpleNamespace(
    stride_tricks=types.SimpleNamespace(
        as_strided=_as_strided, sliding_window_view=_sliding_window_view
    )
)

_cache: dict[str, object] = {}


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    if name in _cache:
        return _cache[name]
    attr = getattr(np, name)
    if isinstance(attr, np.ufunc):
        value = _Ufunc(attr)
    elif isinstance(attr, types.ModuleType) or isinstance(attr, type):
        value = attr  # dtypes (float32 ...), submodules
    elif callable(attr):
        value = _function(attr)
    else:
        value = attr  # constants: pi, inf, newaxis
    _cache[name] = value
    return value
