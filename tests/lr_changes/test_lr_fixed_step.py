"""kFixedStep: lr = step_lr[k], k the largest index with step >= step[k] (else step_lr[0])."""

import pytest
from singa_builtins.lr_changes.fixed_step import FixedStepLR

from singa_core.errors import SingaError
from singa_core.schema import job_pb2


def make(steps, rates):
    conf = job_pb2.LRGenProto(type=job_pb2.kFixedStep)
    conf.fixedstep_conf.step.extend(steps)
    conf.fixedstep_conf.step_lr.extend(rates)
    return FixedStepLR(conf)


def expected(steps, rates, step):
    k = 0
    for i, s in enumerate(steps):
        if step >= s:
            k = i
    return rates[k]


def test_fixed_step_closed_form():
    steps, rates = [0, 60, 65], [0.001, 0.0001, 0.00001]  # examples/cifar10 style
    lr = make(steps, rates)
    for step, want in [
        (0, 0.001),
        (59, 0.001),
        (60, 0.0001),
        (64, 0.0001),
        (65, 1e-5),
        (10_000, 1e-5),
    ]:
        assert lr(step) == pytest.approx(want, rel=1e-6)
        assert lr(step) == pytest.approx(expected(steps, rates, step), rel=1e-6)


def test_before_first_step_uses_first_rate():
    lr = make([10, 20], [0.5, 0.25])
    assert lr(0) == pytest.approx(0.5)
    assert lr(9) == pytest.approx(0.5)
    assert lr(10) == pytest.approx(0.5)
    assert lr(20) == pytest.approx(0.25)


def test_pure_function_of_step_resume():
    """Unlike 0.3's stateful generator, a resumed job gets the right rate at once."""
    lr = make([0, 10, 20, 30], [4.0, 3.0, 2.0, 1.0])
    assert lr(35) == 1.0  # first call, three boundaries past
    assert lr(5) == 4.0  # and it does not depend on earlier calls
    seq = [lr(s) for s in range(40)]
    assert seq == [expected([0, 10, 20, 30], [4.0, 3.0, 2.0, 1.0], s) for s in range(40)]


@pytest.mark.parametrize("steps, rates", [([0, 10], [0.1]), ([], []), ([0], [0.1, 0.2])])
def test_mismatched_lengths(steps, rates):
    with pytest.raises(SingaError) as err:
        make(steps, rates)
    assert "step_lr" in err.value.message and err.value.help


def test_unsorted_steps():
    with pytest.raises(SingaError) as err:
        make([0, 20, 10], [0.1, 0.2, 0.3])
    assert "increasing" in err.value.message
