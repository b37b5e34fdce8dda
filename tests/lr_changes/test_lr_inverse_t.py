"""kInverseT: lr = base_lr / (1 + step / final_lr)."""

import pytest
from singa_builtins.lr_changes.inverse_t import InverseTLR

from singa_core.errors import SingaError
from singa_core.schema import job_pb2


def make(base_lr=0.6, final_lr=40.0):
    conf = job_pb2.LRGenProto(type=job_pb2.kInverseT, base_lr=base_lr)
    conf.inverset_conf.final_lr = final_lr
    return InverseTLR(conf)


@pytest.mark.parametrize(
    "step, expected",
    [(0, 0.6), (10, 0.6 / 1.25), (40, 0.3), (80, 0.2), (120, 0.15), (3, 0.6 / (1 + 3 / 40))],
)
def test_inverse_t_closed_form(step, expected):
    assert make()(step) == pytest.approx(expected, rel=1e-6)


def test_inverse_t_requires_final_lr():
    with pytest.raises(SingaError) as err:
        InverseTLR(job_pb2.LRGenProto(type=job_pb2.kInverseT, base_lr=0.1))
    assert "inverset_conf.final_lr" in err.value.message and err.value.help


def test_inverse_t_rejects_non_positive_final_lr():
    with pytest.raises(SingaError):
        make(final_lr=0.0)
    with pytest.raises(SingaError):
        make(final_lr=-5.0)
