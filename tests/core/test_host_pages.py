"""Large host arrays on huge pages (singa_core/contracts/host_pages.py): zeros of the shape
and type asked, at a 2 MiB boundary from MIN_BYTES on, numpy's own below it or where
turned off; the host device's zeros are these, a device's are not touched."""

from __future__ import annotations

import mmap

import numpy as np
import pytest

from singa_core.contracts import host_pages


@pytest.mark.skipif(not hasattr(mmap, "MADV_HUGEPAGE"), reason="no MADV_HUGEPAGE here")
def test_large_arrays_start_at_a_huge_page_and_hold_zeros():
    a = host_pages.zeros((1000, 784), np.float32)
    assert a.shape == (1000, 784) and a.dtype == np.float32 and a.flags.c_contiguous
    assert a.flags.writeable and a.ctypes.data % (2 << 20) == 0
    assert not a.any()
    a += 1.5  # every byte of it is the array's own
    assert a.sum(dtype=np.float64) == 1.5 * a.size
    b = host_pages.zeros((3 << 20,), np.float64)  # another type, a multiple of the page
    assert b.ctypes.data % (2 << 20) == 0 and b.nbytes == 24 << 20 and not b.any()
    view = a[10:20]
    del a
    view[:] = 2.0  # a view keeps the mapping
    assert (view == 2.0).all()


def test_small_arrays_and_turned_off_are_numpys(monkeypatch):
    small = host_pages.zeros((10, 10), np.float32)
    assert small.flags.owndata and not small.any()
    monkeypatch.setenv(host_pages.ENV_VAR, "0")
    big = host_pages.zeros((1000, 784), np.float32)
    assert big.flags.owndata and big.shape == (1000, 784) and not big.any()


def test_the_host_device_allocates_through_it():
    from singa_core.device import default_device, standin_device

    host = default_device().zeros((1000, 784))
    if hasattr(mmap, "MADV_HUGEPAGE"):
        assert not host.flags.owndata and host.ctypes.data % (2 << 20) == 0
    dev = standin_device()
    other = dev.zeros((1000, 784))
    assert type(other) is not np.ndarray  # the stand-in's own array module
