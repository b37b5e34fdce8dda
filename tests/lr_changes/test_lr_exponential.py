"""kExponential: lr = base_lr / 2 ^ (step / change_freq), float exponent."""

import math

import pytest
from singa_builtins.lr_changes.exponential import ExponentialLR

from singa_core.errors import SingaError
from singa_core.schema import job_pb2


def make(base_lr=0.4, change_freq=20):
    conf = job_pb2.LRGenProto(type=job_pb2.kExponential, base_lr=base_lr)
    conf.exponential_conf.change_freq = change_freq
    return ExponentialLR(conf)


@pytest.mark.parametrize(
    "step, expected",
    [
        (0, 0.4),
        (10, 0.4 / math.sqrt(2.0)),  # float exponent: halfway is 1/sqrt(2), not 1
        (20, 0.2),
        (30, 0.4 / 2**1.5),
        (40, 0.1),
        (7, 0.4 * 2 ** (-7 / 20)),
        (200, 0.4 / 1024),
    ],
)
def test_exponential_closed_form(step, expected):
    assert make()(step) == pytest.approx(expected, rel=1e-6)


def test_exponential_requires_change_freq():
    conf = job_pb2.LRGenProto(type=job_pb2.kExponential, base_lr=0.1)
    with pytest.raises(SingaError) as err:
        ExponentialLR(conf)
    assert "exponential_conf.change_freq" in err.value.message and err.value.help
