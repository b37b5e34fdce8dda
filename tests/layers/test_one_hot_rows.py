"""Products with one-hot rows (plugins/layers/_one_hot_rows.py): the gather is the GEMM
bit for bit, the scatter-add is the transposed GEMM within float32 rounding, and numba's
and numpy's passes agree bit for bit. A GRU run fed one-hot rows:
tests/workers/test_sequence_runs.py."""

from __future__ import annotations

import numpy as np
import pytest

from singa_core.jit import Compiled


def one_hot(rng, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
    idx = rng.integers(0, cols, size=rows)
    x = np.zeros((rows, cols), np.float32)
    x[np.arange(rows), idx] = 1.0
    return x, idx


@pytest.fixture(params=["numba", "numpy"])
def passes(request, monkeypatch):
    from singa_builtins.layers import _one_hot_rows

    if request.param == "numba":
        pytest.importorskip("numba")
        assert _one_hot_rows._PASSES.get() is not None
    else:
        monkeypatch.setattr(_one_hot_rows, "_PASSES", Compiled(lambda: False))
    return _one_hot_rows


def test_the_hot_columns_are_found_and_anything_else_is_refused(passes):
    rng = np.random.default_rng(0)
    x, idx = one_hot(rng, 40, 9)
    out = np.empty(40, np.int64)
    assert passes.one_hot_rows_host(x, out) is out
    np.testing.assert_array_equal(out, idx)
    for i, j, v in [(3, None, 0.5), (5, None, 2.0), (7, "other", 1.0), (9, "zero", 0.0)]:
        y = x.copy()
        if j is None:
            y[i, idx[i]] = v  # not exactly 1
        elif j == "other":
            y[i, (idx[i] + 1) % 9] = v  # two ones in a row
        else:
            y[i] = 0.0  # a row of zeros
        assert passes.one_hot_rows_host(y, out) is None, (i, j, v)
    y = x.copy()
    y[11, (idx[11] + 2) % 9] = -0.25  # a stray value beside the one
    assert passes.one_hot_rows_host(y, out) is None
    assert passes.one_hot_rows_host(x[:, :8], out[:40]) is None  # not contiguous
    assert passes.one_hot_rows_host(x.reshape(-1), out) is None  # not rows


def test_the_gather_is_the_gemm_bit_for_bit(passes):
    rng = np.random.default_rng(1)
    x, idx = one_hot(rng, 300, 65)
    w = rng.standard_normal((48, 65)).astype(np.float32)
    out = np.empty((300, 48), np.float32)
    passes.gather_columns_host(w, idx, out)
    np.testing.assert_array_equal(out, x @ w.T)


def test_the_gather_split_over_two_threads_is_the_gemm_bit_for_bit(passes, monkeypatch):
    """Above ``SPLIT_MIN`` values the rows are copied on the host's threads: the same bits
    as the serial copy and as the GEMM."""
    from singa_core import jit

    if passes._PASSES.get() is None:
        pytest.skip("numpy's path (np.take) has no split form")
    numba = pytest.importorskip("numba")
    if numba.config.NUMBA_NUM_THREADS < 2 or not jit.parallel_ready():
        pytest.skip("numba has no pool of two threads here")
    rng = np.random.default_rng(5)
    x, idx = one_hot(rng, 1000, 65)
    w = rng.standard_normal((96, 65)).astype(np.float32)
    assert x.shape[0] * w.shape[0] >= passes.SPLIT_MIN
    serial = np.empty((1000, 96), np.float32)
    monkeypatch.setattr(jit, "host_threads", lambda: 1)
    passes.gather_columns_host(w, idx, serial)
    calls = []
    split = passes._PASSES.get()[1][1]
    monkeypatch.setattr(jit, "host_threads", lambda: 2)
    monkeypatch.setattr(
        passes._PASSES, "_made", (None, (None, lambda *a: calls.append(a[-1]) or split(*a)))
    )
    out = np.full((1000, 96), np.nan, np.float32)
    passes.gather_columns_host(w, idx, out)
    assert calls == [2]
    np.testing.assert_array_equal(out, serial)
    np.testing.assert_array_equal(out, x @ w.T)


def test_the_scatter_add_is_the_transposed_gemm(passes):
    rng = np.random.default_rng(2)
    x, idx = one_hot(rng, 500, 13)
    src = rng.standard_normal((500, 37)).astype(np.float32)
    out = np.full((13, 37), np.nan, np.float32)  # overwritten, not added to
    passes.add_rows_at_host(src, idx, out)
    np.testing.assert_allclose(out, x.T.astype(np.float64) @ src, rtol=1e-5, atol=1e-5)
    # the rows added in row order: the same bits on both paths
    ref = np.zeros_like(out)
    for i in range(500):
        ref[idx[i]] += src[i]
    np.testing.assert_array_equal(out, ref)
