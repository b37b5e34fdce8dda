"""kLinear: r = step / change_freq; lr = (1 - r) * base_lr + r * final_lr, no clamping."""

import pytest
from singa_builtins.lr_changes.linear import LinearLR

from singa_core.errors import SingaError
from singa_core.schema import job_pb2


def make(base_lr=0.2, final_lr=0.02, change_freq=100):
    conf = job_pb2.LRGenProto(type=job_pb2.kLinear, base_lr=base_lr)
    conf.linear_conf.change_freq = change_freq
    conf.linear_conf.final_lr = final_lr
    return LinearLR(conf)


@pytest.mark.parametrize(
    "step, expected",
    [
        (0, 0.2),
        (1, 0.99 * 0.2 + 0.01 * 0.02),
        (25, 0.75 * 0.2 + 0.25 * 0.02),
        (50, 0.11),
        (100, 0.02),
        (150, -0.5 * 0.2 + 1.5 * 0.02),  # extrapolated beyond change_freq: -0.07
        (250, -1.5 * 0.2 + 2.5 * 0.02),
    ],
)
def test_linear_closed_form(step, expected):
    assert make()(step) == pytest.approx(expected, rel=1e-6)


def test_linear_not_clamped_goes_negative():
    assert make()(150) < 0


def test_linear_requires_final_lr():
    conf = job_pb2.LRGenProto(type=job_pb2.kLinear, base_lr=0.1)
    conf.linear_conf.change_freq = 10
    with pytest.raises(SingaError) as err:
        LinearLR(conf)
    assert "final_lr" in err.value.message and err.value.help


def test_linear_requires_change_freq():
    conf = job_pb2.LRGenProto(type=job_pb2.kLinear, base_lr=0.1)
    conf.linear_conf.final_lr = 0.01
    with pytest.raises(SingaError) as err:
        LinearLR(conf)
    assert "change_freq" in err.value.message
