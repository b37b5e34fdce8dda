"""Random draws made on the layer's own device from a counter-based generator.

A layer's draws (``Layer.draw``: dropout's masks, an RBM's samples) are numbers of
Philox4x64-10, the generator numpy ships as ``np.random.Philox``, at a counter that says
which draw they are: the step, the phase (training or an evaluation) and the draw's number
within that step and phase (0, 1, … in the order the layer makes them), under the layer's
own key (taken from its generator's seed, so fixed by the job's seed and the layer's name).
So:

* the numbers are the same on every device: the CPU computes them with numpy's Philox, a
  GPU with the same rounds in CUDA C (kernel ``philox_uniform``), element ``i`` of a draw
  from block ``i // 8`` of the generator as numpy orders it;
* a step's draws depend on the step alone: a resumed run draws what the uninterrupted one
  did, and a replayed step (:mod:`singa_core.contracts.capture`) reads the step from
  device memory (a :class:`~singa_core.contracts.capture.StepValue` the training loop
  brings to each step) instead of a value fixed at capture.

Uniform draws are ``(u32 >> 8) · 2⁻²⁴`` of each 32-bit half (the low half first), as
numpy's ``Generator.random(dtype=float32)``; normal draws are Box–Muller over pairs of
uniforms.
"""

from __future__ import annotations

import numpy as np

from singa_core.contracts.cuda import CUPY
from singa_core.contracts.jit import Compiled, parallel_ready, serial_or_split
from singa_core.contracts.kernels import define_kernel

#: the second word of the counter: which kind of pass draws
PHASE_WORDS = {"train": 0, "evaluate": 1}

#: below this many values the host's draws run on one thread
PARALLEL_MIN = 1 << 15

PHILOX_SOURCE = r"""
__device__ __forceinline__ void singa_mulhilo(unsigned long long a, unsigned long long b,
                                              unsigned long long* hi, unsigned long long* lo) {
  *lo = a * b;
  *hi = __umul64hi(a, b);
}
extern "C" __global__ void singa_philox_uniform(float* __restrict__ out, long long n,
    unsigned long long key0, unsigned long long key1, unsigned long long draw,
    unsigned long long phase, const double* __restrict__ step_at) {
  const unsigned long long step = (unsigned long long)step_at[0];
  const long long blocks = (n + 7) / 8;
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long b = (long long)blockIdx.x * blockDim.x + threadIdx.x; b < blocks;
       b += stride) {
    unsigned long long c0 = (unsigned long long)b + 1ULL, c1 = draw, c2 = phase, c3 = step;
    unsigned long long k0 = key0, k1 = key1;
    for (int r = 0; r < 10; ++r) {
      unsigned long long hi0, lo0, hi1, lo1;
      singa_mulhilo(0xD2E7470EE14C6C93ULL, c0, &hi0, &lo0);
      singa_mulhilo(0xCA5A826395121157ULL, c2, &hi1, &lo1);
      const unsigned long long n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
      c0 = n0; c1 = lo1; c2 = n2; c3 = lo0;
      k0 += 0x9E3779B97F4A7C15ULL; k1 += 0xBB67AE8584CAA73BULL;
    }
    const unsigned long long words[4] = {c0, c1, c2, c3};
    for (int w = 0; w < 8; ++w) {
      const long long i = b * 8 + w;
      if (i >= n) break;
      const unsigned long long word = words[w >> 1];
      const unsigned int half = (w & 1) ? (unsigned int)(word >> 32) : (unsigned int)word;
      out[i] = (float)(half >> 8) * (1.0f / 16777216.0f);
    }
  }
}
"""


def _uniform_host(out, key0, key1, draw, phase, step_at) -> None:
    """numpy's Philox at counter (0, draw, phase, step) under key (key0, key1): the
    compiled rounds (:func:`compiled_uniform`) where numba is, numpy's generator else."""
    made = _FILL.get() if out.dtype == np.float32 and out.flags.c_contiguous else None
    if made is not None:
        u64 = np.uint64
        args = (out.reshape(-1), u64(key0), u64(key1), u64(draw), u64(phase),
                u64(int(step_at[0])))  # fmt: skip
        serial_or_split(*made, out.size, PARALLEL_MIN, *args)
        return
    # as uint64 arrays: a list of Python ints would pass through float64 and lose bits
    counter = np.array([0, int(draw), int(phase), int(step_at[0])], dtype=np.uint64)
    key = np.array([int(key0), int(key1)], dtype=np.uint64)
    gen = np.random.Generator(np.random.Philox(key=key, counter=counter))
    gen.random(dtype=np.float32, out=out.reshape(-1))  # into out: nothing allocated


def compiles() -> bool:
    """Whether the host's draws will be compiled (numba installed, ``SINGA_NUMBA`` not
    0), without loading numba now."""
    return _FILL.available()


def compiled_uniform():
    """Philox4x64-10's uniform float32 draws compiled with numba: ``(serial, split)``, or
    None (numba missing, ``SINGA_NUMBA=0``). numpy computes one block of the generator at
    a time; ``serial(out, key0, key1, draw, phase, step)`` runs the ten rounds over 64
    blocks at once (64-bit products from 32-bit halves, which the compiler vectorises) and
    gives numpy's numbers bit for bit (tested); ``split(..., parts)`` gives the same
    numbers computed in ``parts`` runs of whole 64-block groups, one a thread (None where
    numba has no thread pool that several callers may share). The host's draws take the
    split where the BLAS runs on several threads (:func:`singa_core.jit.host_threads`)
    and there are at least :data:`PARALLEL_MIN` values (RBM1's 100,000 draws beside MKL
    at 2 threads, in its step's profile: 0.19 -> 0.12 ms)."""
    return _FILL.get()


def _compile_uniform():
    import numba

    lanes = 64
    u64 = np.uint64
    m0, m1 = u64(0xD2E7470EE14C6C93), u64(0xCA5A826395121157)
    w0, w1 = u64(0x9E3779B97F4A7C15), u64(0xBB67AE8584CAA73B)
    low, s32, s8 = u64(0xFFFFFFFF), u64(32), np.uint32(8)
    m0l, m0h, m1l, m1h = m0 & low, m0 >> s32, m1 & low, m1 >> s32
    scale, one = np.float32(1.0 / 16777216.0), u64(1)

    @numba.njit(cache=True, nogil=True)
    def fill_blocks(out, start, stop, key0, key1, draw, phase, step):
        # blocks start .. stop-1 of the generator into their places in out
        n = out.size
        c0s = np.empty(lanes, np.uint64)
        c1s = np.empty(lanes, np.uint64)
        c2s = np.empty(lanes, np.uint64)
        c3s = np.empty(lanes, np.uint64)
        words = np.empty(4 * lanes, np.uint64)
        halves = words.view(np.uint32)  # each word's low half first, as numpy takes them
        for first in range(start, stop, lanes):
            for j in range(lanes):
                c0s[j] = u64(first + j) + one
                c1s[j] = draw
                c2s[j] = phase
                c3s[j] = step
            k0, k1 = key0, key1
            for _ in range(10):
                for j in range(lanes):
                    c0, c2 = c0s[j], c2s[j]
                    a, b = c0 & low, c0 >> s32  # hi(m0·c0) from 32-bit halves
                    p0, p1, p2 = m0l * a, m0l * b, m0h * a
                    mid = (p0 >> s32) + (p1 & low) + (p2 & low)
                    hi0 = m0h * b + (p1 >> s32) + (p2 >> s32) + (mid >> s32)
                    a, b = c2 & low, c2 >> s32  # hi(m1·c2)
                    p0, p1, p2 = m1l * a, m1l * b, m1h * a
                    mid = (p0 >> s32) + (p1 & low) + (p2 & low)
                    hi1 = m1h * b + (p1 >> s32) + (p2 >> s32) + (mid >> s32)
                    c0s[j] = hi1 ^ c1s[j] ^ k0
                    c2s[j] = hi0 ^ c3s[j] ^ k1
                    c1s[j] = m1 * c2
                    c3s[j] = m0 * c0
                k0 = k0 + w0
                k1 = k1 + w1
            for j in range(lanes):
                words[4 * j] = c0s[j]
                words[4 * j + 1] = c1s[j]
                words[4 * j + 2] = c2s[j]
                words[4 * j + 3] = c3s[j]
            base = first * 8
            dst = out[base : base + min(8 * min(lanes, stop - first), n - base)]
            for i in range(dst.size):  # from 0: no negative-index test, so it vectorises
                dst[i] = np.float32(halves[i] >> s8) * scale

    @numba.njit(cache=True, nogil=True)
    def fill(out, key0, key1, draw, phase, step):
        fill_blocks(out, 0, (out.size + 7) // 8, key0, key1, draw, phase, step)

    if not parallel_ready():
        return fill, None

    @numba.njit(cache=True, nogil=True, parallel=True)
    def split_fill(out, key0, key1, draw, phase, step, parts):
        # whole groups of lanes, one part a thread: the serial numbers, split
        blocks = (out.size + 7) // 8
        groups = (blocks + lanes - 1) // lanes
        size = (groups + parts - 1) // parts * lanes
        for p in numba.prange(parts):
            lo, hi = p * size, min(blocks, (p + 1) * size)
            if lo < hi:
                fill_blocks(out, lo, hi, key0, key1, draw, phase, step)

    return fill, split_fill


_FILL = Compiled(_compile_uniform)


def _uniform_cuda(out, key0, key1, draw, phase, step_at, rt=CUPY) -> None:
    from singa_core.contracts.cuda import BLOCK, grid_for

    n = int(out.size)
    if n:
        rt.kernel(PHILOX_SOURCE, "singa_philox_uniform")(
            grid_for((n + 7) // 8), BLOCK,
            (out, np.int64(n), np.uint64(key0), np.uint64(key1), np.uint64(draw),
             np.uint64(phase), step_at),
        )  # fmt: skip


def _uniform_generic(out, key0, key1, draw, phase, step_at) -> None:
    from singa_core.contracts.device import array_module, to_host

    host = np.empty(out.shape, dtype=np.float32)
    _uniform_host(host, key0, key1, draw, phase, to_host(step_at))
    out[...] = array_module(out).asarray(host)


define_kernel(
    "philox_uniform",
    host=_uniform_host,
    cuda=_uniform_cuda,
    generic=_uniform_generic,
    fits=lambda out, *rest: bool(out.flags.c_contiguous),
    doc="U[0, 1) float32 draws of Philox4x64-10 at counter (0, draw, phase, step)",
)


def layer_key(rng: np.random.Generator) -> tuple[int, int]:
    """Two 64-bit words from the seed of a layer's generator, without drawing from it."""
    seq = getattr(rng.bit_generator, "seed_seq", None)
    if seq is None:  # a generator made from a state: its next words, on a copy
        clone = np.random.Generator(type(rng.bit_generator)())
        clone.bit_generator.state = rng.bit_generator.state
        words = clone.integers(0, 2**63, size=2, dtype=np.uint64)
    else:
        words = seq.generate_state(2, np.uint64)
    return int(words[0]), int(words[1])


def normal_from_uniform(u, out) -> None:
    """Box–Muller: ``out`` standard normal from the uniforms ``u`` (the same even size;
    ``u`` is overwritten), through the arrays' own module: the first half of ``u`` gives
    the radii, the second the angles."""
    flat_u, flat = u.reshape(-1), out.reshape(-1)
    h = flat_u.size // 2
    a, b = flat_u[:h], flat_u[h:]
    r, t = flat[:h], flat[h:]
    np.subtract(np.float32(1.0), a, out=r)  # (0, 1]: the log is finite
    np.log(r, out=r)
    np.multiply(r, np.float32(-2.0), out=r)
    np.sqrt(r, out=r)
    np.multiply(b, np.float32(2.0 * np.pi), out=b)
    np.cos(b, out=t)
    np.multiply(t, r, out=t)
    np.sin(b, out=a)
    np.multiply(r, a, out=r)
