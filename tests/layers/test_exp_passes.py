"""The sigmoid's compiled host pass (plugins/layers/_exp_passes.py): numpy's path's bits
exactly, with and without the bias, in place or not, on one thread and two; declined
where it does not apply; the host kernels use it."""

from __future__ import annotations

import numpy as np
import pytest
from singa_builtins.layers.sigmoid import sigmoid_forward

from singa_core.kernels import resolve

pytest.importorskip("numba")


@pytest.fixture
def passes():
    from singa_builtins.layers import _exp_passes

    if _exp_passes._COMPILED.get() is None:
        pytest.skip("the compiled pass is off here (SINGA_NUMBA=0 or numpy's exp untrusted)")
    return _exp_passes


def numpy_bias_sigmoid(x, b):
    x = x.copy()
    out = np.empty_like(x)
    x += b
    sigmoid_forward(x, out)
    return x, out


@pytest.mark.parametrize("shape", [(100, 1000), (7, 3), (50, 1024), (3, 5, 7), (20000,)])
def test_numpys_bits_with_and_without_the_bias_in_place_or_not(passes, shape):
    rng = np.random.default_rng(sum(shape))
    x0 = (rng.standard_normal(shape) * 30).astype(np.float32)
    x0.reshape(-1)[:6] = [0.0, -0.0, 100.0, -100.0, np.inf, np.nan]
    b = rng.standard_normal(shape[-1]).astype(np.float32)
    want_x, want = numpy_bias_sigmoid(x0, b)
    x, out = x0.copy(), np.empty_like(x0)
    assert passes.bias_sigmoid(x, b, out)
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(x, want_x)  # x += b, as numpy's path leaves it
    x = x0.copy()
    assert passes.bias_sigmoid(x, b, x)
    np.testing.assert_array_equal(x, want)
    out = np.empty_like(x0)
    assert passes.sigmoid(x0, out)
    plain = np.empty_like(x0)
    sigmoid_forward(x0, plain)
    np.testing.assert_array_equal(out, plain)


def test_one_thread_and_two_give_the_same_bits(passes, monkeypatch):
    from singa_core import jit

    numba = pytest.importorskip("numba")
    if numba.config.NUMBA_NUM_THREADS < 2 or not jit.parallel_ready():
        pytest.skip("numba has no pool of two threads here")
    rng = np.random.default_rng(3)
    x0 = (rng.standard_normal((100, 1000)) * 8).astype(np.float32)
    b = rng.standard_normal(1000).astype(np.float32)
    outs = []
    for threads in (1, 2):
        monkeypatch.setattr(passes, "use_host_threads", lambda n=threads: jit.use_threads(n))
        x, out = x0.copy(), np.empty_like(x0)
        assert passes.bias_sigmoid(x, b, out)
        outs.append(out)
    np.testing.assert_array_equal(outs[0], outs[1])


def test_declined_where_it_does_not_apply(passes, monkeypatch):
    x = np.ones((4, 6), np.float32)
    b = np.ones(6, np.float32)
    out = np.full_like(x, 7.0)
    assert not passes.bias_sigmoid(x.astype(np.float64), b, out)
    assert not passes.bias_sigmoid(np.asfortranarray(x), b, out)
    assert not passes.bias_sigmoid(x, np.ones(5, np.float32), out)  # not one per column
    assert not passes.sigmoid(x, np.empty((6, 4), np.float32))  # another shape
    monkeypatch.setenv("SINGA_NUMBA", "0")
    assert not passes.sigmoid(x, out)
    assert (out == 7.0).all() and (x == 1.0).all()


def test_the_host_kernels_run_it(passes, monkeypatch):
    calls = []
    for name in ("sigmoid", "bias_sigmoid"):
        real = getattr(passes, name)
        monkeypatch.setattr(passes, name, lambda *a, f=real, n=name: calls.append(n) or f(*a))
    x = np.random.default_rng(4).standard_normal((30, 40)).astype(np.float32)
    out = np.empty_like(x)
    resolve("sigmoid_forward", "cpu")(x, out)
    resolve("bias_sigmoid_forward", "cpu")(x, np.zeros(40, np.float32), out)
    assert calls == ["sigmoid", "bias_sigmoid"]
