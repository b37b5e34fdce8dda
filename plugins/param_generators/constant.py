"""kConstant: SINGA 0.3's ConstGen, every element = ``value`` (ParamGenProto.value)."""

from __future__ import annotations

import numpy as np

from singa_core.param import ParamGenerator


class ConstantInit(ParamGenerator):
    """Fill with ``conf.value`` (default 1); draws no random numbers."""

    type_names = ("kConstant",)

    def fill(self, value: np.ndarray, rng: np.random.Generator) -> None:
        value[...] = np.float32(self.conf.value)
