"""Plugin API path of :mod:`singa_core.contracts.numpy_loops` (the same module object)."""

import sys

from singa_core.contracts import numpy_loops as _contract
from singa_core.contracts.numpy_loops import *  # noqa: F403  (names for editors and type checkers)

sys.modules[__name__] = _contract
