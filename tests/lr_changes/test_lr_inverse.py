"""kInverse: lr = base_lr * (1 + gamma * step) ^ (-pow)."""

import pytest
from singa_builtins.lr_changes.inverse import InverseLR

from singa_core.errors import SingaError
from singa_core.schema import job_pb2


def make(base_lr=0.01, gamma=0.0001, power=0.75):
    conf = job_pb2.LRGenProto(type=job_pb2.kInverse, base_lr=base_lr)
    conf.inverse_conf.gamma = gamma
    conf.inverse_conf.pow = power
    return InverseLR(conf)


@pytest.mark.parametrize("step", [0, 1, 100, 1000, 10_000, 50_000])
def test_inverse_closed_form(step):
    expected = 0.01 * (1.0 + 0.0001 * step) ** -0.75
    assert make()(step) == pytest.approx(expected, rel=1e-6)


def test_inverse_simple_values():
    lr = make(base_lr=1.0, gamma=1.0, power=1.0)
    assert [lr(s) for s in (0, 1, 3, 9)] == pytest.approx([1.0, 0.5, 0.25, 0.1], rel=1e-7)
    lr = make(base_lr=0.3, gamma=0.5, power=2.0)
    assert lr(2) == pytest.approx(0.3 / 4.0, rel=1e-6)
    assert lr(6) == pytest.approx(0.3 / 16.0, rel=1e-6)


def test_inverse_defaults_are_constant():
    # inverse_conf defaults gamma = 1, pow = 0 => (1 + step) ** 0 == 1
    lr = InverseLR(job_pb2.LRGenProto(type=job_pb2.kInverse, base_lr=0.2))
    assert lr(0) == lr(1000) == pytest.approx(0.2)


def test_inverse_rejects_negative_gamma():
    with pytest.raises(SingaError):
        make(gamma=-1.0)
