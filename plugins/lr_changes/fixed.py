"""kFixed: SINGA 0.3's FixedLRGen, ``lr = base_lr`` at every step."""

from __future__ import annotations

from singa_core.updater import LRChange

from ._check import f32


class FixedLR(LRChange):
    """``lr(step) = base_lr``."""

    type_names = ("kFixed",)

    def __call__(self, step: int) -> float:
        return f32(self.base_lr)
