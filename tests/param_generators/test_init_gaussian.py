"""kGaussian: N(mean, std), then times value when value != 1."""

import numpy as np
import pytest
from singa_builtins.param_generators.gaussian import GaussianInit

from singa_core.schema import job_pb2

N = (1000, 1000)


def fill(shape=N, seed=0, **kw):
    w = np.zeros(shape, dtype=np.float32)
    GaussianInit(job_pb2.ParamGenProto(type=job_pb2.kGaussian, **kw)).fill(
        w, np.random.default_rng(seed)
    )
    return w


def check_normal(w, mean, std):
    n = w.size
    assert w.dtype == np.float32
    # 6 standard errors: mean SE = std/sqrt(n), std SE ~= std/sqrt(2n)
    assert abs(float(w.mean(dtype=np.float64)) - mean) < 6 * std / np.sqrt(n)
    assert abs(float(w.std(dtype=np.float64)) - std) < 6 * std / np.sqrt(2 * n)
    # fraction within one std of the mean: 68.27%
    frac = float(np.mean(np.abs(w - mean) < std))
    assert abs(frac - 0.6827) < 0.003


def test_standard_normal_defaults():
    check_normal(fill(), 0.0, 1.0)


def test_mean_std():
    check_normal(fill(mean=0.5, std=0.01), 0.5, 0.01)


def test_value_multiplies_after_sampling():
    # value * N(mean, std) = N(value*mean, |value|*std)
    check_normal(fill(mean=1.0, std=0.2, value=3.0), 3.0, 0.6)


def test_deterministic_for_fixed_seed():
    a, b = fill((50, 40), seed=7, std=0.1), fill((50, 40), seed=7, std=0.1)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, fill((50, 40), seed=8, std=0.1))


def test_non_contiguous_target():
    base = np.zeros((400, 300), dtype=np.float32)
    view = base.T  # Fortran-ordered view is filled in place
    GaussianInit(job_pb2.ParamGenProto(type=job_pb2.kGaussian, std=2.0)).fill(
        view, np.random.default_rng(1)
    )
    assert np.count_nonzero(base) == base.size
    assert float(base.std()) == pytest.approx(2.0, rel=0.02)
