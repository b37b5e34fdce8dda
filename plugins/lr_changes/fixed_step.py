"""kFixedStep: SINGA 0.3's FixedStepLRGen, a piecewise-constant schedule.

``lr = step_lr[k]`` where ``k`` is the largest index with ``step >= fixedstep_conf.step[k]``;
before ``step[0]`` the rate is ``step_lr[0]``.

Deviation from 0.3: SINGA's FixedStepLRGen is stateful, keeping ``last_idx_`` and advancing it
by at most one per call (when ``step >= step[last_idx_ + 1]``). Called once per step from
step 0, as in a fresh run, it gives the same rates as this pure function of ``step``; the pure
form is used so that a job resumed from a checkpoint continues with the right rate at once.
"""

from __future__ import annotations

from bisect import bisect_right

from singa_core.errors import SingaError
from singa_core.updater import LRChange

from ._check import f32

_EXAMPLE = "fixedstep_conf { step: 0 step_lr: 0.01 step: 1000 step_lr: 0.001 }"


class FixedStepLR(LRChange):
    """``lr(step) = step_lr[max(0, max{k : step >= step[k]})]``."""

    type_names = ("kFixedStep",)

    def __init__(self, conf) -> None:
        super().__init__(conf)
        sub = conf.fixedstep_conf
        self.steps = [int(s) for s in sub.step]
        self.rates = [f32(r) for r in sub.step_lr]
        if not self.steps or len(self.steps) != len(self.rates):
            raise SingaError(
                "kFixedStep needs as many learning_rate.fixedstep_conf.step values as "
                f"step_lr values, at least one each (got {len(self.steps)} step, "
                f"{len(self.rates)} step_lr)",
                help=f"give one `step` per `step_lr`, e.g. `{_EXAMPLE}`",
                field="fixedstep_conf",
            )
        for i in range(1, len(self.steps)):
            if self.steps[i] < self.steps[i - 1]:
                raise SingaError(
                    "learning_rate.fixedstep_conf.step must be in increasing order "
                    f"(step[{i - 1}] = {self.steps[i - 1]} > step[{i}] = {self.steps[i]})",
                    help="list the steps from the first change to the last",
                    field=f"fixedstep_conf.step[{i}]",
                )

    def __call__(self, step: int) -> float:
        k = bisect_right(self.steps, step) - 1
        return self.rates[max(k, 0)]
