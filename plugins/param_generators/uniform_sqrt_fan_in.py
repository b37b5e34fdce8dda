"""kUniformSqrtFanIn: SINGA 0.3's UniformSqrtFanInGen.

kUniform (``value * U(low, high)``), then divided by ``sqrt(fan_in / 3)`` (i.e. multiplied by
``sqrt(3 / fan_in)``) with ``fan_in = shape[1]``; the param must be a 2-D ``(out, in)`` matrix.
"""

from __future__ import annotations

import math

import numpy as np

from ._fill import finish, require_matrix, scratch_for
from .uniform import UniformInit


class UniformSqrtFanInInit(UniformInit):
    """``w ~ value * U(low, high) / sqrt(shape[1] / 3)``."""

    type_names = ("kUniformSqrtFanIn",)

    def fill(self, value: np.ndarray, rng: np.random.Generator) -> None:
        _, fan_in = require_matrix("kUniformSqrtFanIn", value, "kUniform")
        out = scratch_for(value)
        self.sample(rng, out)
        # 0.3: data /= sqrt(shape[1] / 3.0f), the quotient computed in float32
        np.divide(out, np.float32(math.sqrt(np.float32(fan_in) / np.float32(3.0))), out=out)
        finish(out, value)
