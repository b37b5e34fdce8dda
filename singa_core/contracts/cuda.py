"""What the kernels' ``cuda`` implementations launch with, and how CI runs them without a GPU.

A kernel's ``cuda`` implementation (:mod:`singa_core.contracts.kernels`) is written once,
as CUDA C source plus a Python function that launches it through a **runtime**:

* :data:`CUPY` (:class:`CupyRuntime`): CuPy's ``RawKernel`` on the current GPU; small
  tables the kernel reads (the pointers of a list of Params, their sizes) are uploaded
  once per distinct list and cached, so a training step sends nothing but its inputs;
* :class:`EmulatedRuntime`: the same CUDA C compiled by the host's C++ compiler with a
  prelude that defines CUDA's built-ins, each launch run thread by thread on the CPU over
  numpy arrays. CI checks every ``cuda`` implementation against the kernel's ``host``
  one this way (``tests/core/test_kernels.py``), so the CUDA source is compiled and its
  arithmetic tested without a GPU. It can emulate kernels whose threads do not wait for
  each other (no ``__syncthreads``, no shared memory): singa's kernels are written so.

A launching function takes the runtime as its last argument, ``rt``; the kernel registry
binds :data:`CUPY` (``functools.partial``).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import subprocess
import tempfile
from pathlib import Path

import numpy as np

#: threads per block of singa's kernels
BLOCK = 256


def grid_for(n: int, block: int = BLOCK, most: int = 4096) -> int:
    """Blocks for a grid-stride loop over ``n`` elements."""
    return max(1, min(most, (int(n) + block - 1) // block))


class CupyRuntime:
    """Launches on the current CUDA device through CuPy."""

    name = "cuda"

    def __init__(self) -> None:
        self._kernels: dict[tuple[str, str], object] = {}
        self._tables: dict[tuple, object] = {}

    @property
    def xp(self):
        import cupy

        return cupy

    def kernel(self, source: str, name: str):
        """``launch(grid, block, args)`` of the ``extern "C" __global__`` function
        ``name`` in ``source`` (compiled once)."""
        key = (source, name)
        k = self._kernels.get(key)
        if k is None:
            import cupy

            k = self._kernels[key] = cupy.RawKernel(source, name)

        def launch(grid: int, block: int, args) -> None:
            k((int(grid),), (int(block),), tuple(args))

        return launch

    def pointers(self, arrays) -> object:
        """A device array of the arrays' device addresses (uint64), cached per list."""
        key = ("ptr", *(int(a.data.ptr) for a in arrays))
        t = self._tables.get(key)
        if t is None:
            t = self._tables[key] = self.xp.asarray(np.array(key[1:], dtype=np.uint64))
        return t

    def table(self, values, dtype) -> object:
        """A device copy of a small host table (sizes, scales), cached by its contents."""
        host = np.ascontiguousarray(np.asarray(values, dtype=dtype))
        key = ("tab", host.dtype.str, host.shape, host.tobytes())
        t = self._tables.get(key)
        if t is None:
            t = self._tables[key] = self.xp.asarray(host)
        return t


CUPY = CupyRuntime()


# -- running CUDA C on the host ----------------------------------------------------------
_PRELUDE = r"""
#include <cmath>
#include <cstdint>
#include <algorithm>
#include <cstring>
struct singa_dim3 { unsigned int x, y, z; };
static singa_dim3 threadIdx, blockIdx, blockDim, gridDim;
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__
static inline double atomicAdd(double* a, double v) { double o = *a; *a += v; return o; }
static inline float atomicAdd(float* a, float v) { float o = *a; *a += v; return o; }
static inline int atomicAdd(int* a, int v) { int o = *a; *a += v; return o; }
static inline int atomicMin(int* a, int v) { int o = *a; if (v < o) *a = v; return o; }
static inline int atomicOr(int* a, int v) { int o = *a; *a |= v; return o; }
static inline void __threadfence() {}
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
using std::isfinite;
"""

_CTYPES = {
    "float": ctypes.c_float,
    "double": ctypes.c_double,
    "int": ctypes.c_int,
    "long long": ctypes.c_longlong,
    "unsigned long long": ctypes.c_ulonglong,
}

_SIGNATURE = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(\w+)\s*\(([^)]*)\)', re.S)


def _params(source: str, name: str) -> list[str]:
    for m in _SIGNATURE.finditer(source):
        if m.group(1) == name:
            return [p.strip() for p in m.group(2).split(",") if p.strip()]
    raise KeyError(f"no kernel {name} in the source")


def _param_type(param: str) -> str:
    """The C type of one parameter declaration (``const float* __restrict__ x`` ->
    ``float *``), without its name and qualifiers."""
    stars = param.count("*")
    words = re.sub(r"\b(const|__restrict__)\b|\*", " ", param).split()
    return " ".join(words[:-1]) + " *" * stars


class EmulatedRuntime:
    """Runs a kernel's CUDA C on the CPU, one thread after another, over numpy arrays
    (see the module doc). Needs a C++ compiler (``c++``/``g++``; ``$CXX`` to choose)."""

    name = "emulated"
    xp = np

    def __init__(self, cache_dir: str | None = None) -> None:
        self._dir = Path(cache_dir or tempfile.mkdtemp(prefix="singa-cuda-emu-"))
        self._libs: dict[tuple[str, str], tuple[ctypes.CDLL, list[str]]] = {}

    @staticmethod
    def compiler() -> str | None:
        import shutil

        for cxx in (os.environ.get("CXX"), "c++", "g++", "clang++"):
            if cxx and shutil.which(cxx):
                return cxx
        return None

    def _build(self, source: str, name: str):
        params = _params(source, name)
        types = [_param_type(p) for p in params]
        args = ", ".join(f"{t} a{i}" for i, t in enumerate(types))
        call = ", ".join(f"a{i}" for i in range(len(types)))
        wrapper = (
            f'extern "C" void singa_launch(unsigned int gx, unsigned int bx{", " if args else ""}'
            f"{args}) {{\n"
            "  gridDim.x = gx; blockDim.x = bx; gridDim.y = gridDim.z = blockDim.y = "
            "blockDim.z = 1;\n"
            "  for (unsigned int b = 0; b < gx; ++b) for (unsigned int t = 0; t < bx; ++t) {\n"
            f"    blockIdx.x = b; threadIdx.x = t; {name}({call});\n  }}\n}}\n"
        )
        code = _PRELUDE + source.replace('extern "C"', "") + "\n" + wrapper
        digest = hashlib.sha256(code.encode()).hexdigest()[:16]
        lib = self._dir / f"{name}-{digest}.so"
        if not lib.exists():
            src = self._dir / f"{name}-{digest}.cpp"
            src.write_text(code)
            cxx = self.compiler()
            if cxx is None:
                raise RuntimeError("no C++ compiler to emulate CUDA kernels with")
            tmp = lib.with_suffix(f".{os.getpid()}.tmp")
            done = subprocess.run(
                [cxx, "-O1", "-shared", "-fPIC", "-std=c++17", "-o", str(tmp), str(src)],
                capture_output=True,
                text=True,
            )
            if done.returncode != 0:
                raise RuntimeError(f"{name} does not compile:\n{done.stderr}")
            os.replace(tmp, lib)
        return ctypes.CDLL(str(lib)), types

    def kernel(self, source: str, name: str):
        key = (source, name)
        if key not in self._libs:
            self._libs[key] = self._build(source, name)
        lib, types = self._libs[key]
        fn = lib.singa_launch

        def launch(grid: int, block: int, args) -> None:
            args = tuple(args)
            if len(args) != len(types):
                raise TypeError(f"{name} takes {len(types)} arguments, got {len(args)}")
            conv = [ctypes.c_uint(int(grid)), ctypes.c_uint(int(block))]
            for t, a in zip(types, args, strict=True):
                if "*" in t:
                    if not isinstance(a, np.ndarray):
                        raise TypeError(f"{name}: a pointer argument must be an array")
                    conv.append(ctypes.c_void_p(a.ctypes.data))
                else:
                    conv.append(_CTYPES[t](a.item() if isinstance(a, np.generic) else a))
            fn(*conv)

        return launch

    def pointers(self, arrays) -> np.ndarray:
        return np.array([a.ctypes.data for a in arrays], dtype=np.uint64)

    def table(self, values, dtype) -> np.ndarray:
        return np.ascontiguousarray(np.asarray(values, dtype=dtype))


# -- one launch over many arrays ------------------------------------------------------------
def multi_tensor_source(name: str, tensors: int, params: int, scalars: str, body: str) -> str:
    """CUDA C of a kernel applying ``body`` to every element of a list of arrays in one
    launch (an updater's step over all its Params).

    The kernel takes a table of ``tensors × P`` array addresses (tensor-major: the first
    tensor of every Param, then the second …), the Params' start offsets in the
    concatenated element range (``P + 1`` of them), a ``params × P`` float table of
    per-Param constants, ``P``, the total element count, then ``scalars`` (a C parameter
    list). In ``body``, ``T0[j]`` … are the elements of the current Param's tensors and
    ``P0`` … its constants."""
    lines = [
        f'extern "C" __global__ void {name}(const unsigned long long* __restrict__ ptrs, '
        "const long long* __restrict__ offsets, const float* __restrict__ prm, int np, "
        f"long long total{', ' + scalars if scalars else ''}) {{",
        "  const long long stride = (long long)gridDim.x * blockDim.x;",
        "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;"
        " i += stride) {",
        "    int lo = 0, hi = np - 1;",
        "    while (lo < hi) { int mid = (lo + hi + 1) >> 1;"
        " if (offsets[mid] <= i) lo = mid; else hi = mid - 1; }",
        "    const int p = lo;",
        "    const long long j = i - offsets[p];",
    ]
    for k in range(tensors):
        lines.append(f"    float* T{k} = (float*)ptrs[{k} * (long long)np + p];")
    for k in range(params):
        lines.append(f"    const float P{k} = prm[{k} * np + p];")
    lines += ["    " + line for line in body.strip().splitlines()]
    lines += ["  }", "}"]
    return "\n".join(lines) + "\n"


def launch_multi_tensor(rt, source: str, name: str, tensors, params, scalars=()) -> None:
    """Launch a :func:`multi_tensor_source` kernel over ``tensors`` (a list per tensor
    kind, each holding one C-contiguous float32 array per Param) with ``params`` (a list
    per constant, one float per Param) and the ``scalars``."""
    first = tensors[0]
    n = len(first)
    if n == 0:
        return
    sizes = [int(a.size) for a in first]
    offsets = rt.table(np.concatenate([[0], np.cumsum(sizes)]), np.int64)
    ptrs = rt.pointers([a for kind in tensors for a in kind])
    prm = rt.table(np.asarray(params, dtype=np.float32).reshape(len(params), n), np.float32)
    total = int(sum(sizes))
    rt.kernel(source, name)(
        grid_for(total), BLOCK, (ptrs, offsets, prm, np.int32(n), np.int64(total), *scalars)
    )


# -- one launch over arrays of one layout ------------------------------------------------------
def elementwise_source(name: str, arrays: str, scalars: str, body: str) -> str:
    """CUDA C of a kernel applying ``body`` to element ``i`` of equally laid-out arrays
    (``arrays``: their C parameter list, e.g. ``const float* x, float* y``), then ``n``
    and ``scalars``."""
    return (
        f'extern "C" __global__ void {name}({arrays}, long long n'
        f"{', ' + scalars if scalars else ''}) {{\n"
        "  const long long stride = (long long)gridDim.x * blockDim.x;\n"
        "  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;"
        " i += stride) {\n"
        + "\n".join("    " + line for line in body.strip().splitlines())
        + "\n  }\n}\n"
    )


def dense_alike(arrays) -> bool:
    """Whether the arrays have one shape and one memory layout and each fills its memory
    without gaps (a C-contiguous array, or a transposed view of one, e.g. the NCHW views
    of batch-innermost buffers): element ``i`` of their memory then corresponds."""
    first = arrays[0]
    if any(a.shape != first.shape or a.strides != first.strides for a in arrays[1:]):
        return False
    if first.flags.c_contiguous:
        return True
    dims = sorted((abs(s), n) for s, n in zip(first.strides, first.shape, strict=True) if n != 1)
    expect = first.itemsize
    for stride, n in dims:
        if stride != expect or stride < 0:
            return False
        expect *= n
    return all(s >= 0 for s in first.strides)


def launch_elementwise(rt, source: str, name: str, arrays, scalars=(), others=()) -> bool:
    """Launch an :func:`elementwise_source` kernel over ``arrays`` when they are
    :func:`dense_alike` (``others``: further C-contiguous arrays the body indexes itself,
    passed after them); False (nothing launched) when they are not, so that the caller
    takes its general path."""
    if not dense_alike(arrays) or not all(a.flags.c_contiguous for a in others):
        return False
    n = int(arrays[0].size)
    if n:
        rt.kernel(source, name)(grid_for(n), BLOCK, (*arrays, *others, np.int64(n), *scalars))
    return True


def elementwise_kernel(
    name: str, arrays: str, body: str, host, *, scalars: str = "", pick=None, extra=None
):
    """A kernel's ``cuda`` implementation for an element-wise host function: one launch
    over the arrays ``pick(*args)`` chooses (default: all the arguments) when they are
    :func:`dense_alike`, else ``host`` itself (numpy's functions, which dispatch to CuPy).
    ``extra(*args)`` gives ``(other arrays, scalar values)`` passed after them (a bias
    the body indexes itself, sizes). Returns a callable taking the host function's
    arguments and ``rt``."""
    source = elementwise_source(name, arrays, scalars, body)

    def run(*args, rt=CUPY):
        chosen = pick(*args) if pick is not None else args
        others, values = extra(*args) if extra is not None else ((), ())
        if not launch_elementwise(rt, source, name, chosen, values, others):
            host(*args)

    run.source = source
    return run
