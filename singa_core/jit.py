"""Plugin API path of :mod:`singa_core.contracts.jit` (the same module object)."""

import sys

from singa_core.contracts import jit as _contract
from singa_core.contracts.jit import *  # noqa: F403  (names for editors and type checkers)

sys.modules[__name__] = _contract
