"""kUniform: U(low, high), then times value when value != 1."""

import numpy as np
import pytest
from singa_builtins.param_generators.uniform import UniformInit

from singa_core.schema import job_pb2

N = (1000, 1000)


def fill(shape=N, seed=0, **kw):
    w = np.zeros(shape, dtype=np.float32)
    UniformInit(job_pb2.ParamGenProto(type=job_pb2.kUniform, **kw)).fill(
        w, np.random.default_rng(seed)
    )
    return w


def check_uniform(w, low, high):
    n, width = w.size, high - low
    assert w.dtype == np.float32
    assert float(w.min()) >= low - 1e-6 * abs(width)
    assert float(w.max()) <= high + 1e-6 * abs(width)
    # with 1e6 samples the extremes are within 1e-4 of the range ends (P(miss) ~ e^-100)
    assert float(w.min()) < low + 1e-4 * width
    assert float(w.max()) > high - 1e-4 * width
    std = width / np.sqrt(12.0)
    assert abs(float(w.mean(dtype=np.float64)) - (low + high) / 2) < 6 * std / np.sqrt(n)
    assert float(w.std(dtype=np.float64)) == pytest.approx(std, rel=0.003)
    # a quarter of the samples in each quarter of the range
    counts, _ = np.histogram(w, bins=4, range=(low, high))
    assert np.allclose(counts / n, 0.25, atol=0.003)


def test_defaults_minus_one_to_one():
    check_uniform(fill(), -1.0, 1.0)


def test_low_high():
    check_uniform(fill(low=0.0, high=0.05), 0.0, 0.05)


def test_value_multiplies():
    check_uniform(fill(low=-0.5, high=1.5, value=2.0), -1.0, 3.0)


def test_deterministic_for_fixed_seed():
    assert np.array_equal(fill((30, 20), seed=3), fill((30, 20), seed=3))
    assert not np.array_equal(fill((30, 20), seed=3), fill((30, 20), seed=4))
