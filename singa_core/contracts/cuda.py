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

A runtime offers what a GPU is asked to do, and nothing else: ``kernel(source, name)``
(a raw kernel launch), ``gemm(a, b, c, alpha, beta)`` (cuBLAS's SGEMM), ``pointers`` and
``table`` (small device tables, uploaded once), and ``xp`` (the array module of its
arrays). A kernel's ``cuda`` implementation takes the runtime as its keyword argument
``rt``; the kernel registry passes :data:`CUPY` on a GPU and :func:`emulated` on the
``standin:cuda`` device, where a whole training step runs the CUDA code on the CPU over the
stand-in's arrays and every launch, BLAS call and table upload is counted where it happens
(:func:`singa_core.contracts.standin.counting`), not where a kernel declares it.
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

    def gemm(self, a, b, c, alpha: float = 1.0, beta: float = 0.0) -> None:
        """``c = alpha·a @ b + beta·c``: one cuBLAS SGEMM (``a``, ``b`` C- or
        F-contiguous, a transposed view included; ``c`` C-contiguous)."""
        import cupy.cublas

        cupy.cublas.gemm("N", "N", a, b, out=c, alpha=float(alpha), beta=float(beta))


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
static inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
  return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
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


def _default_cache() -> Path:
    """Where compiled kernels are kept between processes (content-addressed, so processes
    side by side share them): ``$SINGA_CUDA_EMULATION_CACHE``, else a folder of the
    user's in the temporary directory."""
    env = os.environ.get("SINGA_CUDA_EMULATION_CACHE")
    if env:
        return Path(env)
    return Path(tempfile.gettempdir()) / f"singa-cuda-emulated-{os.getuid()}"


class EmulatedRuntime:
    """Runs a kernel's CUDA C on the CPU, one thread after another (see the module doc).
    Needs a C++ compiler (``c++``/``g++``; ``$CXX`` to choose).

    Its arrays are numpy arrays, or the stand-in's device arrays when ``xp`` is the
    stand-in module (the ``standin:cuda`` device): then every launch, GEMM and table
    upload is recorded in the stand-in's counts as it happens."""

    name = "emulated"

    def __init__(self, cache_dir: str | None = None, xp=np) -> None:
        self._dir = Path(cache_dir) if cache_dir else _default_cache()
        self._dir.mkdir(parents=True, exist_ok=True)
        self._libs: dict[tuple[str, str], tuple[ctypes.CDLL, list[str]]] = {}
        self._tables: dict[tuple, object] = {}
        self.xp = xp

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
                    a = _host_view(a)
                    if not isinstance(a, np.ndarray):
                        raise TypeError(f"{name}: a pointer argument must be an array")
                    conv.append(ctypes.c_void_p(a.ctypes.data))
                else:
                    conv.append(_CTYPES[t](a.item() if isinstance(a, np.generic) else a))
            run_node(name, "kernels", lambda: fn(*conv), keep=args)

        return launch

    def pointers(self, arrays) -> np.ndarray:
        host = np.array([_host_view(a).ctypes.data for a in arrays], dtype=np.uint64)
        return self._upload(("ptr", host.tobytes()), host)

    def table(self, values, dtype) -> np.ndarray:
        host = np.ascontiguousarray(np.asarray(values, dtype=dtype))
        return self._upload(("tab", host.dtype.str, host.shape, host.tobytes()), host)

    def forget_tables(self) -> None:
        """Drop the uploaded tables, as a new process on a GPU starts without them (so a
        run counted from its start uploads its own)."""
        self._tables.clear()

    def _upload(self, key, host: np.ndarray):
        """A table as CuPy's runtime keeps it: uploaded (one copy, counted) the first
        time its contents are seen, the same device array afterwards."""
        t = self._tables.get(key)
        if t is None:
            if len(self._tables) > 4096:
                self._tables.clear()
            run_node("table", "to_device", lambda: None)
            t = self._tables[key] = host
        return t

    def gemm(self, a, b, c, alpha: float = 1.0, beta: float = 0.0) -> None:
        """cuBLAS's SGEMM emulated: ``c = alpha·a @ b + beta·c`` through the host's BLAS,
        one counted launch; ``c`` must be C-contiguous and every operand float32, as
        :meth:`CupyRuntime.gemm` needs."""
        a, b, c = _host_view(a), _host_view(b), _host_view(c)
        if not c.flags.c_contiguous or not a.dtype == b.dtype == c.dtype == np.float32:
            raise ValueError("gemm needs float32 operands and a C-contiguous output")
        for m in (a, b):
            if not (m.flags.c_contiguous or m.flags.f_contiguous):
                raise ValueError("gemm's operands must be C- or F-contiguous (cuBLAS's layouts)")

        def run() -> None:
            product = np.matmul(a, b)
            if alpha != 1.0:
                product *= np.float32(alpha)
            if beta == 0.0:
                np.copyto(c, product)
            else:
                if beta != 1.0:
                    np.multiply(c, np.float32(beta), out=c)
                np.add(c, product, out=c)

        run_node("cublas_sgemm", "kernels", run)


def _host_view(a):
    """The numpy array behind a stand-in device array (the emulated GPU's memory)."""
    inner = getattr(a, "_a", None)
    return inner if type(a).__name__ == "StandinArray" else a


def run_node(name: str, kind: str, run, keep=()) -> None:
    """Counted (and recorded while capturing) by the stand-in: see
    :func:`singa_core.contracts.standin.run_node`."""
    from singa_core.contracts import standin

    standin.run_node(name, kind, run, keep)


_EMULATED: dict[str, EmulatedRuntime] = {}


def emulated() -> EmulatedRuntime:
    """The runtime of the ``standin:cuda`` device: CUDA C run on the CPU over the
    stand-in's device arrays, each launch counted (one per process)."""
    rt = _EMULATED.get("standin")
    if rt is None:
        from singa_core.contracts import standin

        if EmulatedRuntime.compiler() is None:
            from singa_core.contracts.errors import SingaError

            raise SingaError(
                "the standin:cuda device compiles the kernels' CUDA C for the CPU and "
                "found no C++ compiler (c++, g++ or clang++)",
                where="--device",
                help="install a C++ compiler (Debian: apt install g++) or set $CXX; "
                "--device standin runs the kernels' host code instead",
            )
        rt = _EMULATED["standin"] = EmulatedRuntime(xp=standin)
    return rt


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


def elementwise_kernel(
    name: str, arrays: str, body: str, host=None, *, scalars: str = "", pick=None, extra=None
):
    """A kernel's ``cuda`` implementation for an element-wise computation: one launch
    over the arrays ``pick(*args)`` chooses (default: all the arguments). ``extra(*args)``
    gives ``(other arrays, scalar values)`` passed after them (a bias the body indexes
    itself, sizes). Returns a callable taking the kernel's arguments and ``rt``, whose
    ``fits`` (what :func:`singa_core.kernels.define_kernel` reads) says whether the
    chosen arrays are :func:`dense_alike` (and the others C-contiguous); where they are
    not, the registry runs the kernel's ``generic`` implementation. ``host`` is accepted
    for older plugins and unused."""
    source = elementwise_source(name, arrays, scalars, body)

    def run(*args, rt=CUPY):
        chosen = pick(*args) if pick is not None else args
        others, values = extra(*args) if extra is not None else ((), ())
        n = int(chosen[0].size)
        if n:
            rt.kernel(source, name)(grid_for(n), BLOCK, (*chosen, *others, np.int64(n), *values))

    def fits(*args) -> bool:
        chosen = pick(*args) if pick is not None else args
        others = extra(*args)[0] if extra is not None else ()
        return dense_alike(chosen) and all(a.flags.c_contiguous for a in others)

    run.source = source
    run.fits = fits
    return run
