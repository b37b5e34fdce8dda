"""Products over the nonzeros of a mostly-zero operand (plugins/layers/_sparse_rows.py):
``x·wᵀ`` and ``α·hᵀ·x`` equal the float64 products within float32 rounding on real MNIST
rows and on shapes that leave partial blocks, give the same bits on one thread and two,
decline (writing nothing) where they do not apply, and the kernels an RBM calls give the
GEMM's results on a GPU (the stand-in) and the sparse ones on the host."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from singa_core.resources import cpu_flags

numba = pytest.importorskip("numba")


@pytest.fixture
def sparse(monkeypatch):
    from singa_builtins.layers import _sparse_rows

    if _sparse_rows._COMPILED.get() is None:
        pytest.skip("the compiled products are off here (SINGA_NUMBA=0)")
    monkeypatch.setattr(_sparse_rows, "max_density", lambda rows_in_place=False: 0.35)
    return _sparse_rows


def mnist_rows(data_dir, n: int) -> np.ndarray:
    path = data_dir / "mnist" / "train-images-idx3-ubyte.gz"
    with gzip.open(path) as f:
        raw = np.frombuffer(f.read(16 + 784 * n), np.uint8, offset=16)
    return (raw.reshape(n, 784) / np.float32(255)).astype(np.float32)


def sparse_rows(rng, rows: int, cols: int, density: float) -> np.ndarray:
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    x[rng.random((rows, cols)) >= density] = 0.0
    return x


def close_to(got, want64, magnitude64):
    """Within float32 rounding of sums of the products' magnitudes."""
    err = np.abs(got.astype(np.float64) - want64)
    bound = 1e-6 * magnitude64 + 1e-30
    assert (err <= bound).all(), float((err / bound).max())


def test_on_mnist_rows_both_products_are_the_float64_ones(sparse, data_dir):
    x = mnist_rows(data_dir, 100)
    assert 0.1 < np.count_nonzero(x) / x.size < 0.3
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((1000, 784)) * 0.1).astype(np.float32)
    h = rng.random((100, 1000), dtype=np.float32)
    out = np.full((100, 1000), np.nan, np.float32)
    assert sparse.times_wt(x, w, out)
    x64, w64, h64 = (a.astype(np.float64) for a in (x, w, h))
    close_to(out, x64 @ w64.T, np.abs(x64) @ np.abs(w64).T)
    g = np.full((1000, 784), np.nan, np.float32)
    alpha = np.float32(-0.01)
    assert sparse.ht_times(h, x, g, alpha)
    close_to(g, (h64.T @ (x * alpha).astype(np.float64)), np.abs(h64).T @ np.abs(x64) * 0.01)


@pytest.mark.parametrize(
    ("batch", "dim", "rows"),
    [(37, 203, 70), (64, 64, 64), (200, 100, 20), (9, 1001, 97), (130, 17, 150)],
)
def test_partial_blocks_and_odd_sizes(sparse, batch, dim, rows):
    rng = np.random.default_rng(batch + dim + rows)
    x = sparse_rows(rng, batch, dim, 0.2)
    x[3] = 0.0  # a row with no nonzeros gives a row of zeros
    x[:, 5] = 0.0  # and a column with none
    w = rng.standard_normal((rows, dim)).astype(np.float32)
    h = rng.standard_normal((batch, rows)).astype(np.float32)
    if batch * dim * rows < sparse.MIN_WORK:
        pytest.skip("below MIN_WORK")
    x64, w64, h64 = (a.astype(np.float64) for a in (x, w, h))
    out = np.full((batch, rows), np.nan, np.float32)
    assert sparse.times_wt(x, w, out)
    close_to(out, x64 @ w64.T, np.abs(x64) @ np.abs(w64).T)
    assert (out[3] == 0.0).all()
    g = np.full((rows, dim), np.nan, np.float32)
    assert sparse.ht_times(h, x, g, 0.5)
    close_to(g, 0.5 * h64.T @ x64, 0.5 * np.abs(h64).T @ np.abs(x64))
    assert (g[:, 5] == 0.0).all()
    # x·w, with x as the sparse left operand of w's own rows (w: dim x rows)
    v = rng.standard_normal((dim, rows)).astype(np.float32)
    y = np.full((batch, rows), np.nan, np.float32)
    assert sparse.times_w(x, v, y)
    close_to(y, x64 @ v.astype(np.float64), np.abs(x64) @ np.abs(v.astype(np.float64)))
    assert (y[3] == 0.0).all()


def test_one_thread_and_two_give_the_same_bits_run_after_run(sparse, monkeypatch):
    from singa_core import jit

    if numba.config.NUMBA_NUM_THREADS < 2 or not jit.parallel_ready():
        pytest.skip("numba has no pool of two threads here")
    rng = np.random.default_rng(7)
    x = sparse_rows(rng, 100, 300, 0.2)
    w = rng.standard_normal((250, 300)).astype(np.float32)
    h = rng.standard_normal((100, 250)).astype(np.float32)
    results = []
    for threads in (1, 2, 2):
        monkeypatch.setattr(sparse, "use_host_threads", lambda n=threads: jit.use_threads(n))
        out, g = np.empty((100, 250), np.float32), np.empty((250, 300), np.float32)
        y = np.empty((100, 250), np.float32)
        assert sparse.times_wt(x, w, out) and sparse.ht_times(h, x, g, 1.0)
        assert sparse.times_w(x, w.T.copy(), y)
        results.append((out, g, y))
    for got in results[1:]:
        for a, b in zip(got, results[0], strict=True):
            np.testing.assert_array_equal(a, b)


def test_declined_with_nothing_written(sparse, monkeypatch):
    rng = np.random.default_rng(3)
    x = sparse_rows(rng, 100, 300, 0.2)
    w = rng.standard_normal((250, 300)).astype(np.float32)
    h = rng.standard_normal((100, 250)).astype(np.float32)

    def declined(x, w=w, h=h):
        out = np.full((x.shape[0], w.shape[0]), 7.0, np.float32)
        g = np.full((h.shape[1], x.shape[1]), 7.0, np.float32)
        y = np.full((x.shape[0], w.shape[0]), 7.0, np.float32)
        ok = sparse.times_wt(x, w, out) or sparse.ht_times(h, x, g)
        ok = ok or sparse.times_w(x, np.ascontiguousarray(w.T), y)
        return not ok and (out == 7.0).all() and (g == 7.0).all() and (y == 7.0).all()

    dense = sparse_rows(rng, 100, 300, 0.5)
    assert declined(dense)  # past max_density: the GEMM is as fast
    assert declined(x.astype(np.float64))  # not float32
    assert declined(np.asfortranarray(x))  # not C-contiguous
    assert declined(x[:10, :10], w[:10, :10], h[:10, :10])  # below MIN_WORK
    for var in ("SINGA_NUMBA", "SINGA_SPARSE_ROWS"):
        monkeypatch.setenv(var, "0")
        assert declined(x)
        monkeypatch.delenv(var)
    assert not declined(x)


def test_a_nan_in_x_reaches_the_products(sparse):
    rng = np.random.default_rng(4)
    x = sparse_rows(rng, 100, 300, 0.2)
    x[2, 7] = np.nan
    w = rng.standard_normal((250, 300)).astype(np.float32)
    h = rng.standard_normal((100, 250)).astype(np.float32)
    out, g = np.empty((100, 250), np.float32), np.empty((250, 300), np.float32)
    assert sparse.times_wt(x, w, out) and sparse.ht_times(h, x, g)
    assert np.isnan(out[2]).all() and not np.isnan(np.delete(out, 2, axis=0)).any()
    assert np.isnan(g[:, 7]).all() and not np.isnan(np.delete(g, 7, axis=1)).any()


def test_the_vector_width_is_read_from_the_cpu(monkeypatch, tmp_path):
    from singa_builtins.layers import _sparse_rows

    (tmp_path / "cpuinfo").write_text("processor\t: 0\nflags\t\t: fpu sse avx2 fma avx512f\n")
    assert "avx512f" in cpu_flags(tmp_path)
    (tmp_path / "cpuinfo").write_text("processor\t: 0\n")
    assert cpu_flags(tmp_path) == frozenset()
    monkeypatch.setattr(_sparse_rows, "cpu_flags", lambda: frozenset({"avx2", "avx512f"}))
    assert _sparse_rows.vector_width() == 16
    monkeypatch.setattr(_sparse_rows, "cpu_flags", lambda: frozenset({"avx2", "fma"}))
    assert _sparse_rows.vector_width() == 8
    # the sums are as wide as the CPU's GEMM kernels: the same limits either way
    assert _sparse_rows.max_density() == pytest.approx(0.35)
    assert _sparse_rows.max_density(rows_in_place=True) == pytest.approx(0.15)


@pytest.mark.slow  # compiles the other width's code, uncached: 3-7 s
def test_the_other_vector_width_computes_the_same_products(sparse, monkeypatch):
    """The code an AVX-512 CPU runs (16-float vectors, blocks of 64), compiled here (LLVM
    splits its vectors where the CPU's are narrower, uncached): the float64 products."""
    other = 8 if sparse.vector_width() == 16 else 16
    fns = sparse._compile(other)
    assert fns[4] == 4 * other
    monkeypatch.setattr(sparse, "_compiled", lambda: fns)
    rng = np.random.default_rng(12)
    for batch, dim, rows in ((100, 784, 1000), (37, 203, 70), (9, 1001, 97)):
        x = sparse_rows(rng, batch, dim, 0.2)
        w = rng.standard_normal((rows, dim)).astype(np.float32)
        h = rng.standard_normal((batch, rows)).astype(np.float32)
        x64, w64, h64 = (a.astype(np.float64) for a in (x, w, h))
        out = np.full((batch, rows), np.nan, np.float32)
        assert sparse.times_wt(x, w, out)
        close_to(out, x64 @ w64.T, np.abs(x64) @ np.abs(w64).T)
        g = np.full((rows, dim), np.nan, np.float32)
        assert sparse.ht_times(h, x, g, 0.5)
        close_to(g, 0.5 * h64.T @ x64, 0.5 * np.abs(h64).T @ np.abs(x64))
        v = rng.standard_normal((dim, rows)).astype(np.float32)
        y = np.full((batch, rows), np.nan, np.float32)
        assert sparse.times_w(x, v, y)
        close_to(y, x64 @ v.astype(np.float64), np.abs(x64) @ np.abs(v.astype(np.float64)))


def test_the_kernel_is_the_sparse_product_on_the_host_and_one_gemm_on_a_gpu(sparse):
    from singa_core import kernels as K
    from singa_core.blas import gemm
    from singa_core.contracts import standin
    from singa_core.device import standin_device, to_host, using_device

    rng = np.random.default_rng(5)
    x = sparse_rows(rng, 100, 300, 0.2)
    w = rng.standard_normal((250, 300)).astype(np.float32)
    host = np.empty((100, 250), np.float32)
    K.resolve("sparse_rows_times_wt", "cpu")(x, w, host)
    want = np.empty_like(host)
    assert sparse.times_wt(x, w, want)
    np.testing.assert_array_equal(host, want)
    dense = sparse_rows(rng, 100, 300, 0.9)
    K.resolve("sparse_rows_times_wt", "cpu")(dense, w, host)
    gemm_out = np.empty_like(host)  # singa's GEMM (numpy's matmul may cut it otherwise)
    gemm(dense, w.T, gemm_out)
    np.testing.assert_array_equal(host, gemm_out)
    dev = standin_device()
    with using_device(dev):
        dx, dw = dev.asarray(x), dev.asarray(w)
        dout = dev.asarray(np.empty((100, 250), np.float32))
        with standin.counting() as counts:
            dev.kernels.sparse_rows_times_wt(dx, dw, dout)
        assert counts.kernels == 1 and counts.reads == 0
        np.testing.assert_allclose(to_host(dout), x @ w.T, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("eight_at_a_time", [True, False])
def test_the_nonzeros_are_listed_as_numpy_finds_them(sparse, eight_at_a_time):
    """Both listers (eight values at a time with AVX2's permutes, one at a time without):
    each line's nonzeros in order, NaN and infinities included, −0.0 left out, lines of
    any length (a rest past the last eight), values times alpha; -1 past the limit."""
    if eight_at_a_time and not sparse._vector_listing():
        pytest.skip("this CPU (or numba's target) has no AVX2")
    index_nonzeros = sparse._compile(eight_at_a_time=eight_at_a_time)[0]
    rng = np.random.default_rng(11)
    for lines, inner in ((100, 784), (7, 13), (3, 5), (40, 8), (9, 1001)):
        x = sparse_rows(rng, lines, inner, 0.3)
        x[0, :3] = [np.nan, -0.0, np.inf]
        x[-1] = 0.0
        ptr = np.empty(lines + 1, np.int64)
        offs, vals = np.empty(x.size + 8, np.int32), np.empty(x.size + 8, np.float32)
        alpha, step = np.float32(-0.5), 32
        n = index_nonzeros(x.reshape(-1), lines, inner, step, alpha, x.size, sparse._PACK,
                           ptr, offs, vals)  # fmt: skip
        rows, cols = np.nonzero(x)
        assert n == len(rows)
        np.testing.assert_array_equal(ptr, np.searchsorted(rows, np.arange(lines + 1)))
        np.testing.assert_array_equal(offs[:n], cols * step)
        np.testing.assert_array_equal(vals[:n], x[rows, cols] * alpha)
        limit = max(0, len(rows) - 1)
        assert index_nonzeros(x.reshape(-1), lines, inner, step, alpha, limit, sparse._PACK,
                              ptr, offs, vals) == -1  # fmt: skip
