"""The test counts the README and docs/testing.md give are what a fresh checkout collects
with the test extra (CI's install): packages outside the extras that some tests use when
present (PyTorch, CuPy) are hidden from the collection, so the count is the same here."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO


def _quoted(path, pattern: str) -> int:
    m = re.search(pattern, (REPO / path).read_text())
    assert m, f"{path} no longer says how many tests the quick subset has"
    return int(m.group(1).replace(",", ""))


@pytest.mark.slow
def test_the_quick_subset_count_in_the_docs_is_what_pytest_collects():
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "not slow",
         "-p", "no:cacheprovider"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
        env={**os.environ, "SINGA_TEST_WITHOUT": "torch,cupy",
             "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "tests" / "without_extras"),
                                                         os.environ.get("PYTHONPATH")]))},
    )  # fmt: skip
    m = re.search(r"(\d+)/\d+ tests collected", done.stdout)
    assert m, done.stdout[-2000:]
    collected = int(m.group(1))
    readme = _quoted("README.md", r'-m "not slow"\s+# ([\d,]+) tests')
    testing = _quoted("docs/testing.md", r"\(([\d,]+) tests in")
    assert (readme, testing) == (collected, collected), (
        f"pytest collects {collected:,} tests in the quick subset; README.md says {readme:,}, "
        f"docs/testing.md {testing:,}: update them"
    )
