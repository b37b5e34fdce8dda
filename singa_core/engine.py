"""Plugin API 1.0 path of :mod:`singa_core.contracts.engine` (the same module object)."""

import sys

from singa_core.contracts import engine as _contract
from singa_core.contracts.engine import *  # noqa: F403  (names for editors and type checkers)

sys.modules[__name__] = _contract
