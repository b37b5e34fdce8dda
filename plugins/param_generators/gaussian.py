"""kGaussian: SINGA 0.3's GaussianGen.

Samples ``N(mean, std)`` and then, only if ``value != 1``, multiplies by ``value``.
"""

from __future__ import annotations

import numpy as np

from singa_core.param import ParamGenerator

from ._fill import finish, scratch_for


class GaussianInit(ParamGenerator):
    """``w ~ N(mean, std)``, times ``value`` when ``value != 1``."""

    type_names = ("kGaussian",)

    def sample(self, rng: np.random.Generator, out: np.ndarray) -> None:
        """Write ``value * N(mean, std)`` samples into the float32 array ``out``."""
        rng.standard_normal(dtype=np.float32, out=out)
        out *= np.float32(self.conf.std)
        out += np.float32(self.conf.mean)
        if self.conf.value != 1:
            out *= np.float32(self.conf.value)

    def fill(self, value: np.ndarray, rng: np.random.Generator) -> None:
        out = scratch_for(value)
        self.sample(rng, out)
        finish(out, value)
