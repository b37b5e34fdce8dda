"""kStep: lr = base_lr * gamma ^ floor(step / change_freq) (integer division)."""

import pytest
from singa_builtins.lr_changes.step import StepLR

from singa_core.errors import SingaError
from singa_core.schema import job_pb2


def make(base_lr=0.1, gamma=0.5, change_freq=30):
    conf = job_pb2.LRGenProto(type=job_pb2.kStep, base_lr=base_lr)
    conf.step_conf.gamma = gamma
    conf.step_conf.change_freq = change_freq
    return StepLR(conf)


@pytest.mark.parametrize(
    "step, expected",
    [
        (0, 0.1),
        (1, 0.1),
        (29, 0.1),  # 29 // 30 == 0: no fractional decay
        (30, 0.05),
        (59, 0.05),
        (60, 0.025),
        (95, 0.0125),
        (300, 0.1 * 0.5**10),
    ],
)
def test_step_closed_form(step, expected):
    assert make()(step) == pytest.approx(expected, rel=1e-6)


def test_step_gamma_point_one():
    lr = make(base_lr=0.01, gamma=0.1, change_freq=1000)
    assert lr(999) == pytest.approx(0.01, rel=1e-6)
    assert lr(1000) == pytest.approx(0.001, rel=1e-6)
    assert lr(2500) == pytest.approx(0.0001, rel=1e-5)


def test_step_requires_change_freq():
    conf = job_pb2.LRGenProto(type=job_pb2.kStep, base_lr=0.1)
    with pytest.raises(SingaError) as err:
        StepLR(conf)
    assert "change_freq" in err.value.message
    assert err.value.help and "step_conf" in err.value.help


def test_step_rejects_negative_change_freq():
    with pytest.raises(SingaError):
        make(change_freq=-5)
