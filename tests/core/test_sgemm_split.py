"""OpenBLAS's GEMMs cut over singa's own thread pool (singa_core/contracts/sgemm_split.py):
on when OpenBLAS is the SGEMM and more than one thread is asked for, every layout the
GEMM seam takes multiplies right, OpenBLAS itself runs one thread, the compiled passes get
the threads, and nothing is cut where it cannot be."""

from __future__ import annotations

import numpy as np
import pytest

from singa_core.blas import gemm, get_blas_threads, host_sgemm, set_blas_threads
from singa_core.contracts import sgemm, sgemm_split
from singa_core.contracts.openblas import openblas_threads
from singa_core.jit import host_threads, parallel_ready


def _needs_split():
    lib = sgemm._chosen or sgemm.chosen()
    if lib is None or lib.name != "openblas":
        pytest.skip("the host's SGEMM is not OpenBLAS here (an Intel CPU with the mkl extra)")
    try:
        import numba
    except ImportError:
        pytest.skip("numba (the fast extra) is not installed")
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("numba's pool has one thread on this machine")
    if not parallel_ready():
        pytest.skip("numba has no thread pool several callers may share here")


@pytest.fixture
def two_threads():
    _needs_split()
    before = get_blas_threads() or 1
    assert set_blas_threads(2)
    yield
    set_blas_threads(before)


def test_two_threads_cut_over_singas_pool(two_threads):
    assert sgemm_split.active() and sgemm_split.parts() == 2
    assert get_blas_threads() == 2  # what singa's GEMMs run on
    assert openblas_threads() == 1  # OpenBLAS's own pool is not used
    assert host_threads() == 2  # the compiled passes share the same pool
    assert "cut over singa's 2 threads" in host_sgemm()


def test_one_thread_turns_it_off(two_threads):
    set_blas_threads(1)
    assert not sgemm_split.active()
    assert get_blas_threads() == 1 and host_threads() == 1
    assert "cut over" not in host_sgemm()


def test_without_numba_openblas_keeps_its_threads(monkeypatch):
    _needs_split()
    before = get_blas_threads() or 1
    monkeypatch.setenv("SINGA_NUMBA", "0")
    try:
        set_blas_threads(2)
        assert not sgemm_split.active()
        assert openblas_threads() == 2
        assert host_threads() == 1  # OpenBLAS's spinning workers: one thread of ours
    finally:
        monkeypatch.delenv("SINGA_NUMBA")
        set_blas_threads(before)


def _layouts(m, k, n, rng):
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    yield "plain", a, b
    yield "a transposed", np.asfortranarray(a), b
    yield "b transposed", a, np.asfortranarray(b)
    yield "both transposed", np.asfortranarray(a), np.asfortranarray(b)
    wide_a = np.zeros((m + 2, k + 5), np.float32)
    wide_a[1 : m + 1, 3 : k + 3] = a
    wide_b = np.zeros((n + 4, k + 1), np.float32)  # bᵀ's rows inside a wider block
    wide_b[2 : n + 2, :k] = b.T
    yield "strided views", wide_a[1 : m + 1, 3 : k + 3], wide_b[2 : n + 2, :k].T


@pytest.mark.parametrize(
    ("m", "k", "n"),
    [
        (100, 784, 1000),  # cut along n (RBM1's v·Wᵀ)
        (1000, 200, 784),  # cut along m (its weight gradient)
        (32, 160, 2250),  # few rows, many columns (a convolution's)
        (77, 300, 61),  # sides not multiples of 16
        # the last share ends at the side itself, not at a multiple of 16 below it (its
        # last 1-7 columns or rows were left unwritten: CIFAR-10's conv2 did not learn)
        (32, 160, 22500),  # n = 16·1406 + 4: cut along n (CIFAR-10's conv2, forward)
        (64, 200, 2500),  # n = 16·156 + 4 (the MNIST MLP's 2,500 hidden units)
        (1025, 64, 70),  # m = 16·64 + 1: cut along m
        (3, 5, 7),  # too small to cut: one call
    ],
)
def test_products_equal_the_exact_product(two_threads, m, k, n):
    rng = np.random.default_rng(m * 7 + n)
    for name, a, b in _layouts(m, k, n, rng):
        exact = a.astype(np.float64) @ b.astype(np.float64)
        tol = 1e-5 * np.sqrt(k) * (np.abs(a).max() * np.abs(b).max())
        c = np.full((m, n), np.nan, np.float32)
        gemm(a, b, c)
        assert np.abs(c - exact).max() <= tol, name
        # beta = 1 and alpha: c = 0.5·a·b + c, into a block of a wider output
        out = np.ones((m + 3, n + 9), np.float32)
        gemm(a, b, out[2 : m + 2, 4 : n + 4], beta=1.0, alpha=0.5)
        assert np.abs(out[2 : m + 2, 4 : n + 4] - (1.0 + 0.5 * exact)).max() <= tol, name
        out[2 : m + 2, 4 : n + 4] = 1.0
        assert (out == 1.0).all(), f"{name}: wrote outside its block"
        again = np.empty_like(c)
        gemm(a, b, again)
        assert np.array_equal(again, c), f"{name}: not repeatable"


def test_cut_blocks_agree_with_one_uncut_call(two_threads):
    """Each element is still one dot product over all of K: the cut result is the uncut
    one to within OpenBLAS's rounding (its kernels' edges), at sizes that are cut."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((96, 512)).astype(np.float32)
    b = rng.standard_normal((512, 1024)).astype(np.float32)
    assert a.shape[0] * a.shape[1] * b.shape[1] >= sgemm_split.MIN_WORK
    cut = np.empty((96, 1024), np.float32)
    gemm(a, b, cut)
    set_blas_threads(1)
    whole = np.empty_like(cut)
    gemm(a, b, whole)
    np.testing.assert_allclose(cut, whole, rtol=1e-5, atol=1e-4)


def test_small_products_are_not_cut(two_threads, monkeypatch):
    calls = []
    runs = sgemm_split._RUN.get()
    run = runs.along_side
    monkeypatch.setattr(runs, "along_side", lambda *args: calls.append(args) or run(*args))
    a = np.ones((8, 8), np.float32)
    c = np.empty((8, 8), np.float32)
    gemm(a, a, c)
    assert calls == [] and (c == 8.0).all()
    big_a = np.ones((64, 256), np.float32)
    big_b = np.ones((256, 128), np.float32)
    big_c = np.empty((64, 128), np.float32)
    gemm(big_a, big_b, big_c)
    assert len(calls) == 1 and (big_c == 256.0).all()


def test_few_row_products_are_not_transposed_when_cut(two_threads):
    """OpenBLAS's few-row products are computed transposed (``cᵀ = W·xᵀ``) only while it
    runs its own threads; cut over singa's pool, the product as it stands is the faster."""
    from singa_core import blas

    assert not blas._few_rows_transposed()
    set_blas_threads(1)
    assert blas._few_rows_transposed()


@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("beta", [0.0, 1.0])
def test_small_c_long_k_is_cut_along_k(two_threads, monkeypatch, ta, tb, beta):
    """A convolution's weight gradient (C 20 x 26, K 36,864: LeNet's first) has no side to
    cut; it is cut along K, every layout and beta right, the sum repeatable."""
    runs = sgemm_split._RUN.get()
    calls = []
    run = runs.along_k
    monkeypatch.setattr(runs, "along_k", lambda *args: calls.append(args) or run(*args))
    rng = np.random.default_rng(5)
    m, n, k = 20, 26, 36864
    a = rng.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
    a_op, b_op = (a.T if ta else a), (b.T if tb else b)
    c0 = rng.standard_normal((m, n)).astype(np.float32)
    c = c0.copy()
    gemm(a_op, b_op, c, beta=beta, alpha=0.5)
    assert len(calls) == 1
    want = 0.5 * (a_op.astype(np.float64) @ b_op.astype(np.float64)) + beta * c0
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=2e-3)
    again = c0.copy()
    gemm(a_op, b_op, again, beta=beta, alpha=0.5)
    assert np.array_equal(again, c)  # the same blocks, added in the same order


@pytest.mark.parametrize("k", [36864 + 3, 36864 + 7])
def test_the_last_share_of_k_is_summed_to_its_end(two_threads, k):
    """K not a multiple of 16 by under 8: the last thread's share runs to K itself."""
    rng = np.random.default_rng(k)
    a = rng.standard_normal((20, k)).astype(np.float32)
    b = rng.standard_normal((k, 26)).astype(np.float32)
    a[:, -3:] = 1000.0  # the last values dominate: a dropped one shows at once
    c = np.empty((20, 26), np.float32)
    gemm(a, b, c)
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=2e-2)


def test_short_k_small_c_is_not_cut(two_threads, monkeypatch):
    runs = sgemm_split._RUN.get()
    calls = []
    monkeypatch.setattr(runs, "along_k", lambda *args: calls.append(args))
    monkeypatch.setattr(runs, "along_side", lambda *args: calls.append(args))
    a = np.ones((20, 600), np.float32)  # K = 600 < 2 x MIN_K_PER_PART
    b = np.ones((600, 26), np.float32)
    c = np.empty((20, 26), np.float32)
    assert 20 * 26 * 600 < sgemm_split.MIN_WORK or 600 < 2 * sgemm_split.MIN_K_PER_PART
    gemm(a, b, c)
    assert calls == [] and (c == 600.0).all()
