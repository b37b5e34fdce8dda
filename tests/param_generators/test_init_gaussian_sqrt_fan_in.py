"""kGaussianSqrtFanIn: value * N(mean, std) / sqrt(shape[1]); 2-D params only."""

import numpy as np
import pytest
from singa_builtins.param_generators.gaussian_sqrt_fan_in import GaussianSqrtFanInInit

from singa_core.errors import SingaError
from singa_core.schema import job_pb2


def gen(**kw):
    return GaussianSqrtFanInInit(job_pb2.ParamGenProto(type=job_pb2.kGaussianSqrtFanIn, **kw))


def test_divides_by_sqrt_columns():
    w = np.zeros((250, 4000), dtype=np.float32)  # (out, in): fan_in = 4000, not 250
    gen(std=2.0).fill(w, np.random.default_rng(0))
    n, std = w.size, 2.0 / np.sqrt(4000.0)
    assert w.dtype == np.float32
    assert abs(float(w.mean(dtype=np.float64))) < 6 * std / np.sqrt(n)
    assert abs(float(w.std(dtype=np.float64)) - std) < 6 * std / np.sqrt(2 * n)


def test_mean_and_value_are_scaled_too():
    w = np.zeros((10_000, 100), dtype=np.float32)
    gen(mean=1.0, std=0.5, value=2.0).fill(w, np.random.default_rng(1))
    # (2 * N(1, 0.5)) / 10 = N(0.2, 0.1)
    assert float(w.mean(dtype=np.float64)) == pytest.approx(0.2, abs=6 * 0.1 / np.sqrt(w.size))
    assert float(w.std(dtype=np.float64)) == pytest.approx(0.1, rel=0.005)


def test_same_draws_as_gaussian_then_divided():
    from singa_builtins.param_generators.gaussian import GaussianInit

    a = np.zeros((20, 9), dtype=np.float32)
    b = np.zeros((20, 9), dtype=np.float32)
    gen(std=0.3).fill(a, np.random.default_rng(11))
    GaussianInit(job_pb2.ParamGenProto(type=job_pb2.kGaussian, std=0.3)).fill(
        b, np.random.default_rng(11)
    )
    np.testing.assert_allclose(a, b / np.float32(3.0), rtol=1e-6)


@pytest.mark.parametrize("shape", [(10,), (2, 3, 4), (1, 2, 3, 4)])
def test_needs_matrix(shape):
    with pytest.raises(SingaError) as err:
        gen().fill(np.zeros(shape, dtype=np.float32), np.random.default_rng(0))
    assert "2-D" in err.value.message and str(shape) in err.value.message
    assert err.value.help


def test_deterministic_for_fixed_seed():
    a, b = np.zeros((8, 6), np.float32), np.zeros((8, 6), np.float32)
    gen().fill(a, np.random.default_rng(42))
    gen().fill(b, np.random.default_rng(42))
    assert np.array_equal(a, b)
