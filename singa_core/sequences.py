"""Plugin API path of :mod:`singa_core.contracts.sequences` (the same module object)."""

import sys

from singa_core.contracts import sequences as _contract
from singa_core.contracts.sequences import *  # noqa: F403  (names for editors and type checkers)

sys.modules[__name__] = _contract
