"""Plugin API path of :mod:`singa_core.contracts.capture` (the same module object)."""

import sys

from singa_core.contracts import capture as _contract
from singa_core.contracts.capture import *  # noqa: F403  (names for editors and type checkers)

sys.modules[__name__] = _contract
