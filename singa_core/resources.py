"""Plugin API path of :mod:`singa_core.contracts.resources` (the same module object)."""

import sys

from singa_core.contracts import resources as _contract
from singa_core.contracts.resources import *  # noqa: F403  (names for editors and type checkers)

sys.modules[__name__] = _contract
