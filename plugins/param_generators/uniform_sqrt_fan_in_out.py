"""kUniformSqrtFanInOut: SINGA 0.3's UniformSqrtFanInOutGen.

kUniform (``value * U(low, high)``), then divided by ``sqrt(shape[0] + shape[1])``; the param
must be a 2-D ``(out, in)`` matrix. The user puts the ``sqrt(6)`` of Glorot's rule into
``low``/``high`` or ``value`` (0.3's docs claim it is applied automatically; the code does not).
"""

from __future__ import annotations

import math

import numpy as np

from ._fill import finish, require_matrix, scratch_for
from .uniform import UniformInit


class UniformSqrtFanInOutInit(UniformInit):
    """``w ~ value * U(low, high) / sqrt(shape[0] + shape[1])``."""

    type_names = ("kUniformSqrtFanInOut",)

    def fill(self, value: np.ndarray, rng: np.random.Generator) -> None:
        fan_out, fan_in = require_matrix("kUniformSqrtFanInOut", value, "kUniform")
        out = scratch_for(value)
        self.sample(rng, out)
        np.divide(out, np.float32(math.sqrt(fan_out + fan_in)), out=out)
        finish(out, value)
