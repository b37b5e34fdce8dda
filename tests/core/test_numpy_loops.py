"""numpy's own float32 exp and tanh loops called from compiled code
(singa_core.numpy_loops): found in the ufunc's C structure, trusted only when
they give numpy's bits, and then the same bits from a compiled pass on any block."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from singa_core import numpy_loops


@pytest.mark.parametrize("name", numpy_loops.UNARY)
def test_the_loop_is_found_and_gives_numpys_bits(name):
    found = numpy_loops.loop(name)
    if found is None:
        pytest.skip(f"numpy's {name} loop is not trusted on this numpy: its path stays")
    fn, data = found
    x = np.random.default_rng(1).standard_normal(10_001).astype(np.float32) * 40
    out = np.empty_like(x)
    args = (ctypes.c_void_p * 2)(x.ctypes.data, out.ctypes.data)
    numpy_loops._LOOP(fn)(
        args, (ctypes.c_ssize_t * 1)(x.size), (ctypes.c_ssize_t * 2)(4, 4), data or None
    )
    with np.errstate(all="ignore"):
        want = getattr(np, name)(x)
    np.testing.assert_array_equal(out.view(np.uint32), want.view(np.uint32))


def test_an_unknown_loop_is_refused():
    with pytest.raises(ValueError, match="no numpy loop"):
        numpy_loops.loop("log")


def test_a_structure_that_does_not_name_the_ufunc_is_not_read(monkeypatch):
    """A layout other than the one read (another numpy) fails the checks: no loop."""
    monkeypatch.setattr(numpy_loops, "_NAME", numpy_loops._TYPES)  # the wrong field
    assert numpy_loops._read(np.exp) is None
    monkeypatch.undo()
    monkeypatch.setattr(numpy_loops, "_NTYPES", numpy_loops._NTYPES + 4)
    assert numpy_loops._read(np.exp) is None


def test_a_loop_with_other_bits_is_not_trusted(monkeypatch):
    """The probe catches a loop that is not numpy's (tanh's found for exp)."""
    exp, tanh = numpy_loops._read(np.exp), numpy_loops._read(np.tanh)
    if exp is None or tanh is None:
        pytest.skip("the loops are not read on this numpy")
    assert numpy_loops._agrees("exp", *exp)
    assert not numpy_loops._agrees("exp", *tanh)
    monkeypatch.setattr(numpy_loops, "_found", {})
    monkeypatch.setattr(numpy_loops, "_read", lambda ufunc: tanh)
    assert numpy_loops.loop("exp") is None


def test_called_from_a_compiled_function_on_blocks():
    numba = pytest.importorskip("numba")
    found = numpy_loops.loop("tanh")
    if found is None:
        pytest.skip("numpy's tanh loop is not trusted here")
    call_unary = numpy_loops.call_unary_intrinsic()

    @numba.njit
    def by_blocks(x, out, fn, data, block):
        for lo in range(0, x.size, block):
            n = min(block, x.size - lo)
            call_unary(fn, data, x.ctypes.data + 4 * lo, out.ctypes.data + 4 * lo, n)

    x = np.random.default_rng(2).standard_normal(1_000).astype(np.float32) * 5
    out = np.full_like(x, np.nan)
    by_blocks(x, out, *found, 77)
    np.testing.assert_array_equal(out, np.tanh(x))
    by_blocks(x, x, *found, 1_000)  # in place
    np.testing.assert_array_equal(x, out)
