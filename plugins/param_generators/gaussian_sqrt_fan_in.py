"""kGaussianSqrtFanIn: SINGA 0.3's GaussianSqrtFanInGen.

kGaussian (``value * N(mean, std)``), then divided by ``sqrt(fan_in)`` with
``fan_in = shape[1]``; the param must be a 2-D ``(out, in)`` matrix.
"""

from __future__ import annotations

import math

import numpy as np

from ._fill import finish, require_matrix, scratch_for
from .gaussian import GaussianInit


class GaussianSqrtFanInInit(GaussianInit):
    """``w ~ value * N(mean, std) / sqrt(shape[1])``."""

    type_names = ("kGaussianSqrtFanIn",)

    def fill(self, value: np.ndarray, rng: np.random.Generator) -> None:
        _, fan_in = require_matrix("kGaussianSqrtFanIn", value, "kGaussian")
        out = scratch_for(value)
        self.sample(rng, out)
        np.divide(out, np.float32(math.sqrt(fan_in)), out=out)
        finish(out, value)
