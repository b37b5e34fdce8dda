"""Hide installed modules, as if an optional extra were not installed.

Put this folder first on PYTHONPATH and name the top-level modules to hide in
SINGA_TEST_WITHOUT (comma-separated, e.g. ``grpc_tools,ray``): importing one of them (or a
submodule) then raises ModuleNotFoundError in this process and in every Python process it
starts with the same environment. tests/core/test_suite_hygiene.py uses it to check that the
tests of an optional extra skip, naming the extra, where it is missing.
"""

import os
import sys
from importlib.abc import MetaPathFinder

_HIDDEN = {m.strip() for m in os.environ.get("SINGA_TEST_WITHOUT", "").split(",") if m.strip()}


class _Hide(MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in _HIDDEN:
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


if _HIDDEN:
    sys.meta_path.insert(0, _Hide())
