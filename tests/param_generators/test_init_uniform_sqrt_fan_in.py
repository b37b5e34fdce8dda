"""kUniformSqrtFanIn: value * U(low, high) / sqrt(shape[1] / 3); 2-D params only."""

import numpy as np
import pytest
from singa_builtins.param_generators.uniform_sqrt_fan_in import UniformSqrtFanInInit

from singa_core.errors import SingaError
from singa_core.schema import job_pb2


def gen(**kw):
    return UniformSqrtFanInInit(job_pb2.ParamGenProto(type=job_pb2.kUniformSqrtFanIn, **kw))


def test_range_is_scaled_by_sqrt_3_over_fan_in():
    w = np.zeros((300, 3000), dtype=np.float32)  # fan_in = 3000 -> factor sqrt(3/3000)
    gen().fill(w, np.random.default_rng(0))
    bound = np.sqrt(3.0 / 3000.0)
    assert w.dtype == np.float32
    assert float(np.abs(w).max()) <= bound * (1 + 1e-6)
    assert float(np.abs(w).max()) > bound * (1 - 1e-4)
    # U(-b, b) has std b/sqrt(3) = 1/sqrt(fan_in): the variance-preserving init
    assert float(w.std(dtype=np.float64)) == pytest.approx(1.0 / np.sqrt(3000.0), rel=0.003)
    assert abs(float(w.mean(dtype=np.float64))) < 6 * bound / np.sqrt(3 * w.size)


def test_low_high_value():
    w = np.zeros((100_000, 12), dtype=np.float32)  # factor sqrt(3/12) = 0.5
    gen(low=0.0, high=4.0, value=0.5).fill(w, np.random.default_rng(2))
    # 0.5 * U(0, 4) * 0.5 = U(0, 1)
    assert float(w.min()) >= 0.0 and float(w.max()) <= 1.0
    assert float(w.mean(dtype=np.float64)) == pytest.approx(0.5, abs=0.003)
    assert float(w.std(dtype=np.float64)) == pytest.approx(1 / np.sqrt(12), rel=0.005)


@pytest.mark.parametrize("shape", [(5,), (3, 3, 3)])
def test_needs_matrix(shape):
    with pytest.raises(SingaError) as err:
        gen().fill(np.zeros(shape, dtype=np.float32), np.random.default_rng(0))
    assert "kUniformSqrtFanIn" in err.value.message and err.value.help


def test_deterministic_for_fixed_seed():
    a, b = np.zeros((8, 6), np.float32), np.zeros((8, 6), np.float32)
    gen().fill(a, np.random.default_rng(9))
    gen().fill(b, np.random.default_rng(9))
    assert np.array_equal(a, b)
