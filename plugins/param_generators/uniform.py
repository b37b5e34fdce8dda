"""kUniform: SINGA 0.3's UniformGen.

Samples ``U(low, high)`` and then, only if ``value != 1``, multiplies by ``value``.
"""

from __future__ import annotations

import numpy as np

from singa_core.param import ParamGenerator

from ._fill import finish, scratch_for


class UniformInit(ParamGenerator):
    """``w ~ U(low, high)``, times ``value`` when ``value != 1``."""

    type_names = ("kUniform",)

    def sample(self, rng: np.random.Generator, out: np.ndarray) -> None:
        """Write ``value * U(low, high)`` samples into the float32 array ``out``."""
        low, high = np.float32(self.conf.low), np.float32(self.conf.high)
        rng.random(dtype=np.float32, out=out)
        out *= high - low
        out += low
        if self.conf.value != 1:
            out *= np.float32(self.conf.value)

    def fill(self, value: np.ndarray, rng: np.random.Generator) -> None:
        out = scratch_for(value)
        self.sample(rng, out)
        finish(out, value)
