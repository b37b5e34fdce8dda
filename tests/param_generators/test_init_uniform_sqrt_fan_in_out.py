"""kUniformSqrtFanInOut: value * U(low, high) / sqrt(shape[0] + shape[1]); 2-D params only."""

import numpy as np
import pytest
from singa_builtins.param_generators.uniform_sqrt_fan_in_out import UniformSqrtFanInOutInit

from singa_core.errors import SingaError
from singa_core.schema import job_pb2


def gen(**kw):
    return UniformSqrtFanInOutInit(job_pb2.ParamGenProto(type=job_pb2.kUniformSqrtFanInOut, **kw))


def test_glorot_with_sqrt6_in_bounds():
    # the user puts sqrt(6) into low/high: U(-sqrt6, sqrt6)/sqrt(in+out) = Glorot uniform
    s6 = float(np.sqrt(6.0))
    w = np.zeros((784, 1000), dtype=np.float32)
    gen(low=-s6, high=s6).fill(w, np.random.default_rng(0))
    bound = np.sqrt(6.0 / (784 + 1000))
    assert w.dtype == np.float32
    assert float(np.abs(w).max()) <= bound * (1 + 1e-6)
    assert float(np.abs(w).max()) > bound * (1 - 1e-4)
    assert float(w.std(dtype=np.float64)) == pytest.approx(bound / np.sqrt(3.0), rel=0.003)
    assert abs(float(w.mean(dtype=np.float64))) < 6 * bound / np.sqrt(3 * w.size)


def test_no_automatic_sqrt6():
    # defaults U(-1, 1): divided by sqrt(16 + 9) = 5 only, no sqrt(6) factor
    w = np.zeros((16, 9), dtype=np.float32)
    big = np.zeros((1600, 900), dtype=np.float32)
    gen().fill(w, np.random.default_rng(0))
    gen(value=4.0).fill(big, np.random.default_rng(0))
    assert float(np.abs(w).max()) <= 0.2 * (1 + 1e-6)
    assert float(np.abs(big).max()) == pytest.approx(4.0 / np.sqrt(2500.0), rel=1e-3)


def test_needs_matrix():
    with pytest.raises(SingaError) as err:
        gen().fill(np.zeros((4,), dtype=np.float32), np.random.default_rng(0))
    assert "(4,)" in err.value.message and err.value.help


def test_deterministic_for_fixed_seed():
    a, b = np.zeros((8, 6), np.float32), np.zeros((8, 6), np.float32)
    gen().fill(a, np.random.default_rng(1))
    gen().fill(b, np.random.default_rng(1))
    assert np.array_equal(a, b)
