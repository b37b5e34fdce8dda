"""kConstant: every element equals ParamGenProto.value."""

import numpy as np
from singa_builtins.param_generators.constant import ConstantInit

from singa_core.schema import job_pb2


def test_constant_fills_value():
    w = np.zeros((3, 4), dtype=np.float32)
    ConstantInit(job_pb2.ParamGenProto(type=job_pb2.kConstant, value=0.5)).fill(
        w, np.random.default_rng(0)
    )
    assert w.dtype == np.float32
    assert np.all(w == np.float32(0.5))


def test_constant_default_value_is_one_and_any_rank():
    b = np.full((7,), 3.0, dtype=np.float32)
    ConstantInit(job_pb2.ParamGenProto(type=job_pb2.kConstant)).fill(b, np.random.default_rng(0))
    assert np.all(b == 1.0)
    k = np.empty((2, 3, 4, 5), dtype=np.float32)
    ConstantInit(job_pb2.ParamGenProto(type=job_pb2.kConstant, value=-2)).fill(
        k, np.random.default_rng(0)
    )
    assert np.all(k == -2.0)


def test_constant_draws_no_random_numbers():
    rng = np.random.default_rng(5)
    ConstantInit(job_pb2.ParamGenProto(type=job_pb2.kConstant, value=0)).fill(
        np.empty((4, 4), np.float32), rng
    )
    assert rng.random() == np.random.default_rng(5).random()
