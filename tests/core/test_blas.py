"""Thread pinning and the fused axpy updaters use."""

from __future__ import annotations

import numpy as np

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
