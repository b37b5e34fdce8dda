"""singa's packed GEMM (singa_core/contracts/packed_gemm.py): products with a packed operand
equal the float64 ones within float32 rounding for every remainder of rows and columns,
with alpha and beta (c unread where beta is 0), on strided views; the same bits on one
thread and two; declined (nothing written) where it does not apply; chosen by the CPU's
flags; and blas.FixedOperand uses it on the host with OpenBLAS."""

from __future__ import annotations

import numpy as np
import pytest

from singa_core.contracts import packed_gemm

numba = pytest.importorskip("numba")


@pytest.fixture
def compiled():
    if packed_gemm._COMPILED.get() is None:
        pytest.skip("the compiled kernels are off here (SINGA_NUMBA=0)")
    if not packed_gemm._host_target():
        pytest.skip("numba compiles for another CPU than this one")
    return packed_gemm


def packed(b, threads: int = 1):
    k, n = b.shape
    out = np.full(packed_gemm.packed_size(k, n), np.nan, np.float32)
    assert packed_gemm.pack(b, out, threads)
    return out


def within_rounding(got, a, b, alpha=1.0, beta=0.0, c0=None):
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = alpha * (a64 @ b64)
    size = abs(alpha) * (np.abs(a64) @ np.abs(b64))
    if beta:
        want += beta * c0
        size += abs(beta) * np.abs(c0)
    err = np.abs(got.astype(np.float64) - want)
    assert (err <= 1e-6 * (a.shape[1] + 2) * size + 1e-30).all()


@pytest.mark.parametrize("m", [1, 2, 3, 4, 5, 6, 7, 12, 13, 50])
@pytest.mark.parametrize(("k", "n"), [(1, 16), (33, 45), (64, 17), (512, 48)])
def test_every_remainder_of_rows_and_columns(compiled, m, k, n):
    rng = np.random.default_rng(m * 1000 + k + n)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    c = np.full((m, n), np.nan, np.float32)  # beta 0: c is not read (no NaN comes in)
    assert compiled.multiply(packed(b), k, n, a, c, 1.0, 0.0, 1)
    within_rounding(c, a, b)
    c0 = rng.standard_normal((m, n), dtype=np.float32)
    c = c0.copy()
    assert compiled.multiply(packed(b), k, n, a, c, 0.5, 1.0, 1)
    within_rounding(c, a, b, 0.5, 1.0, c0.astype(np.float64))


def test_row_and_column_major_operands_pack_alike_and_views_work(compiled):
    rng = np.random.default_rng(3)
    u = rng.standard_normal((96, 40), dtype=np.float32)  # b = uᵀ (column-major) …
    row_major = np.ascontiguousarray(u.T)  # … and the same b laid out by rows
    np.testing.assert_array_equal(packed(u.T), packed(row_major))
    block = rng.standard_normal((96, 70), dtype=np.float32)[:, 5:38]  # a block of columns
    np.testing.assert_array_equal(packed(block), packed(np.ascontiguousarray(block)))
    big_a = rng.standard_normal((11, 60), dtype=np.float32)
    a = big_a[2:9, 10:50]  # rows of a wider matrix: a leading dimension of 60
    big_c = np.zeros((9, 120), np.float32)
    c = big_c[1:8, 7:103]
    assert compiled.multiply(packed(u.T), 40, 96, a, c, 1.0, 0.0, 1)
    within_rounding(c, a, u.T)
    assert (big_c[0] == 0).all() and (big_c[:, :7] == 0).all() and (big_c[:, 103:] == 0).all()


def test_one_thread_and_two_give_the_same_bits(compiled):
    from singa_core import jit

    if numba.config.NUMBA_NUM_THREADS < 2 or not jit.parallel_ready():
        pytest.skip("numba has no pool of two threads here")
    rng = np.random.default_rng(4)
    a = rng.standard_normal((50, 200), dtype=np.float32)
    b = rng.standard_normal((200, 100), dtype=np.float32)
    results = []
    for threads in (1, 2, 2):
        c = np.empty((50, 100), np.float32)
        assert compiled.multiply(packed(b, threads), 200, 100, a, c, 1.0, 0.0, threads)
        results.append(c)
    np.testing.assert_array_equal(results[0], results[1])
    np.testing.assert_array_equal(results[0], results[2])


def test_declined_with_nothing_written(compiled):
    rng = np.random.default_rng(5)
    b = rng.standard_normal((30, 20), dtype=np.float32)
    p = packed(b)
    a = rng.standard_normal((6, 30), dtype=np.float32)
    c = np.full((6, 20), 7.0, np.float32)
    assert not compiled.multiply(p, 30, 20, a.astype(np.float64), c, 1.0, 0.0, 1)
    assert not compiled.multiply(p, 30, 20, np.asfortranarray(a), c, 1.0, 0.0, 1)
    assert not compiled.multiply(p, 30, 20, a[:, :29], c, 1.0, 0.0, 1)  # K disagrees
    assert not compiled.multiply(p, 30, 20, a, np.asfortranarray(c), 1.0, 0.0, 1)
    assert (c == 7.0).all()
    out = np.full(packed_gemm.packed_size(30, 20), 7.0, np.float32)
    assert not compiled.pack(b.astype(np.float64), out, 1)
    assert not compiled.pack(b[::2, ::2], out, 1)  # no axis of unit stride
    assert not compiled.pack(b, out[:10], 1)  # too small a buffer
    assert (out == 7.0).all()


def test_it_applies_by_the_cpus_flags_and_can_be_turned_off(monkeypatch):
    if not packed_gemm._COMPILED.available() or not packed_gemm._host_target():
        pytest.skip("numba missing, turned off, or compiling for another CPU")
    assert packed_gemm.applies(frozenset({"avx2", "fma"}))
    assert not packed_gemm.applies(frozenset({"avx2", "fma", "avx512f"}))  # wider BLAS
    assert not packed_gemm.applies(frozenset({"sse4_2"}))
    monkeypatch.setenv("SINGA_PACKED_GEMM", "0")
    assert not packed_gemm.applies(frozenset({"avx2", "fma"}))


def test_a_fixed_operand_packs_with_it_on_openblas(compiled, monkeypatch):
    from singa_core.blas import FixedOperand, gemm, set_blas_threads
    from singa_core.contracts import sgemm

    if not packed_gemm.applies():
        pytest.skip("this CPU is not one it runs on (AVX2 and FMA without AVX-512)")
    monkeypatch.setenv("SINGA_SGEMM", "openblas")
    monkeypatch.setattr(sgemm, "_chosen", None)
    set_blas_threads(1)
    try:
        assert FixedOperand.packs()
        rng = np.random.default_rng(6)
        u = rng.standard_normal((1536, 512), dtype=np.float32)  # a GRU's U: products h·Uᵀ
        fixed = FixedOperand(50)
        fixed.set(u.T)
        assert fixed._own is not None and fixed._dims is None
        h = rng.standard_normal((50, 512), dtype=np.float32)
        got, want = np.empty((50, 1536), np.float32), np.empty((50, 1536), np.float32)
        gemm(h, fixed, got)
        gemm(h, u.T, want)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        monkeypatch.setenv("SINGA_PACKED_GEMM", "0")
        fixed.set(u.T)
        assert fixed._own is None and not FixedOperand.packs()
        gemm(h, fixed, got)
        np.testing.assert_array_equal(got, want)  # the BLAS's own product
    finally:
        monkeypatch.undo()
        sgemm._chosen = None
