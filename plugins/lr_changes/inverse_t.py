"""kInverseT: SINGA 0.3's InvTLRGen, ``lr = base_lr / (1 + step / final_lr)``.

Despite its name, ``inverset_conf.final_lr`` acts as a step count: the rate is halved after
``final_lr`` steps, divided by three after twice as many, and so on.
"""

from __future__ import annotations

from singa_core.errors import SingaError
from singa_core.updater import LRChange

from ._check import f32, require_set


class InverseTLR(LRChange):
    """``lr(step) = base_lr / (1 + step / final_lr)``."""

    type_names = ("kInverseT",)

    def __init__(self, conf) -> None:
        super().__init__(conf)
        require_set("kInverseT", conf, "inverset_conf", "final_lr", "final_lr: 1000")
        self.final_lr = float(conf.inverset_conf.final_lr)
        if self.final_lr <= 0:
            raise SingaError(
                f"kInverseT needs learning_rate.inverset_conf.final_lr > 0 (got {self.final_lr})",
                help="final_lr is the number of steps after which the rate is halved, "
                "e.g. `inverset_conf { final_lr: 1000 }`",
                field="inverset_conf.final_lr",
            )

    def __call__(self, step: int) -> float:
        return f32(self.base_lr / (1.0 + step / self.final_lr))
