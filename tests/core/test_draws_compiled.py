"""The host's compiled Philox (singa_core/contracts/draws.py, numba) gives numpy's
Philox4x64-10 numbers bit for bit: every size's tail, keys and counters with their high
bits set, and steps past 2**32; SINGA_NUMBA=0 takes numpy's generator (the kernel's
``fits`` sends non-contiguous arrays to its generic implementation)."""

from __future__ import annotations

import numpy as np
import pytest

from singa_core.contracts import draws


def numpys(n, key0, key1, draw, phase, step):
    out = np.empty(n, np.float32)
    counter = np.array([0, draw, phase, step], dtype=np.uint64)
    key = np.array([key0, key1], dtype=np.uint64)
    np.random.Generator(np.random.Philox(key=key, counter=counter)).random(
        dtype=np.float32, out=out
    )
    return out


@pytest.mark.parametrize("n", [1, 7, 8, 9, 511, 512, 513, 4096, 100_003])
def test_the_compiled_draws_are_numpys_bit_for_bit(n, monkeypatch):
    pytest.importorskip("numba")
    monkeypatch.setenv("SINGA_NUMBA", "1")
    assert draws.compiled_uniform() is not None
    for key0, key1, draw, phase, step in [
        (1, 2, 0, 0, 0),
        (2**63 + 5, 12345678901234567, 3, 1, 2**40 + 7),
        (2**64 - 1, 0, 2**33, 0, 6000),
    ]:
        out = np.full(n, -1.0, np.float32)
        draws._uniform_host(out, key0, key1, draw, phase, np.array([float(step)]))
        np.testing.assert_array_equal(out, numpys(n, key0, key1, draw, phase, step))


def test_without_numba_the_draws_are_numpys_generator(monkeypatch):
    monkeypatch.setenv("SINGA_NUMBA", "0")
    assert draws.compiled_uniform() is None and not draws.compiles()
    out = np.empty((3, 5), np.float32)
    draws._uniform_host(out, 9, 8, 7, 1, np.array([5.0]))
    np.testing.assert_array_equal(out.reshape(-1), numpys(15, 9, 8, 7, 1, 5))


@pytest.mark.parametrize("parts", [1, 2, 3, 7])
@pytest.mark.parametrize("n", [1, 513, 100_003])
def test_the_draws_split_over_threads_are_numpys_bit_for_bit(n, parts, monkeypatch):
    """Whole 64-block groups a thread (as beside a BLAS on several threads): the same
    numbers as one thread computes, every tail included, however many parts."""
    pytest.importorskip("numba")
    monkeypatch.setenv("SINGA_NUMBA", "1")
    made = draws.compiled_uniform()
    if made[1] is None:
        pytest.skip("numba has no thread pool that several callers may share here")
    out = np.full(n, -1.0, np.float32)
    u64 = np.uint64
    made[1](out, u64(2**63 + 5), u64(77), u64(3), u64(1), u64(2**40 + 7), parts)
    np.testing.assert_array_equal(out, numpys(n, 2**63 + 5, 77, 3, 1, 2**40 + 7))
    # the host kernel takes the split where the BLAS runs on several threads
    from singa_core import jit

    monkeypatch.setattr(jit, "host_threads", lambda: 2)
    out[...] = -1.0
    draws._uniform_host(out, 2**63 + 5, 77, 3, 1, np.array([float(2**40 + 7)]))
    np.testing.assert_array_equal(out, numpys(n, 2**63 + 5, 77, 3, 1, 2**40 + 7))
