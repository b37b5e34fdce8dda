"""Thread pinning and the fused axpy updaters use."""

from __future__ import annotations

import numpy as np
import pytest

from singa_core.blas import axpy, get_blas_threads, set_blas_threads


def test_axpy_contiguous_and_strided():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((300, 7)).astype(np.float32)
    y = rng.standard_normal((300, 7)).astype(np.float32)
    expect = y + np.float32(-0.25) * x
    axpy(-0.25, x, y)
    np.testing.assert_allclose(y, expect, rtol=1e-6, atol=1e-6)
    xt = x.T  # not contiguous: numpy fallback
    yt = np.zeros((7, 300), np.float32)
    axpy(2.0, xt, yt)
    np.testing.assert_allclose(yt, 2 * xt, rtol=1e-6)


def test_set_and_get_threads():
    before = get_blas_threads()
    if before is None:  # numpy without OpenBLAS: nothing to pin, and it says so
        assert set_blas_threads(1) is False
        return
    assert set_blas_threads(1) and get_blas_threads() == 1
    set_blas_threads(before)
    assert get_blas_threads() == before


@pytest.mark.parametrize("trans_a", [False, True])
@pytest.mark.parametrize("trans_b", [False, True])
@pytest.mark.parametrize("mkn", [(5, 3, 4), (64, 50, 65), (1, 7, 1)])
def test_gemm_acc_adds_the_product_in_place(trans_a, trans_b, mkn):
    from singa_core.blas import gemm_acc

    m, k, n = mkn
    rng = np.random.default_rng(0)
    a = rng.standard_normal((k, m) if trans_a else (m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
    a, b = (a.T if trans_a else a), (b.T if trans_b else b)
    c = rng.standard_normal((m, n)).astype(np.float32)
    expected = c.astype(np.float64) + a.astype(np.float64) @ b
    before = c.ctypes.data
    gemm_acc(a, b, c)
    assert c.ctypes.data == before
    np.testing.assert_allclose(c, expected, rtol=1e-5, atol=1e-5)
    # a strided operand (neither row- nor column-contiguous) takes the numpy path
    wide = np.repeat(a, 2, axis=1)
    strided = wide[:, ::2]
    assert not strided.flags.c_contiguous and not strided.flags.f_contiguous or k == 1
    c2 = c.copy()
    gemm_acc(strided, b, c2)
    np.testing.assert_allclose(c2, expected + a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("beta", [0.0, 1.0])
def test_gemm_on_blocks_of_larger_arrays(beta):
    """Operands that are column blocks of wider matrices (a leading dimension) and their
    transposes, as the convolutions use them; the numpy path for other layouts."""
    from singa_core.blas import gemm

    rng = np.random.default_rng(1)
    big_a = rng.standard_normal((6, 40)).astype(np.float32)
    big_b = rng.standard_normal((9, 50)).astype(np.float32)
    big_c = rng.standard_normal((6, 70)).astype(np.float32)
    a = big_a[:, 3:12]  # 6 x 9, leading dimension 40
    b = big_b[:, 5:25]  # 9 x 20, leading dimension 50
    c = big_c[:, 10:30]  # 6 x 20, leading dimension 70
    before = big_c.copy()
    expected = a.astype(np.float64) @ b + beta * c
    gemm(a, b, c, beta=beta)
    np.testing.assert_allclose(c, expected, rtol=1e-5, atol=1e-5)
    outside = np.ones(big_c.shape, bool)
    outside[:, 10:30] = False
    np.testing.assert_array_equal(big_c[outside], before[outside])  # nothing else touched
    # transposed blocks: (9 x 6).T and (20 x 9).T
    at, bt = big_a[:, 3:12].T.copy().T, big_b[:, 5:25].T.copy().T
    c2 = np.zeros((6, 20), np.float32)
    gemm(at, bt, c2, beta=beta)
    np.testing.assert_allclose(c2, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
    # neither axis of unit stride: the numpy fallback gives the same
    c3 = np.ones((6, 20), np.float32)
    gemm(big_a[:, ::4][:, :9], b, c3, beta=beta)
    exp3 = big_a[:, ::4][:, :9].astype(np.float64) @ b + beta
    np.testing.assert_allclose(c3, exp3, rtol=1e-5, atol=1e-5)
