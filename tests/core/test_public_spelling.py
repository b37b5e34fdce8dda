"""One public spelling of the plugin API: outside the core, the contracts are imported by
their plugin API paths (``singa_core.layer``, ``singa_core.device``, ...), never as
``singa_core.contracts.*``, which stays the core's inside (docs/architecture.md, "Plugin
API 1.0 paths"). Plugins, examples, the scaffold's templates, the docs and the tests are
read as text, so a docstring or a code sample counts as much as an import."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# `singa_core.contracts.layer`, `import singa_core.contracts`, `from singa_core import contracts`
INSIDE = re.compile(r"singa_core\.contracts\b|from\s+singa_core\s+import\s+(?:\(\s*)?contracts\b")

# the tests of the contracts themselves: they name both spellings on purpose
CONTRACT_TESTS = {
    "tests/core/test_plugin_api_paths.py",
    "tests/core/test_import_graph.py",
    "tests/core/test_public_spelling.py",
    "tests/test_devices.py",
    "tests/test_cupy_api.py",
    "tests/core/test_cuda_errors.py",  # contracts/cuda_errors.py, the core's inside
    "tests/core/test_startup_interrupt_anywhere.py",  # the core's own import order
}

TREES = [
    ("plugins", ("*.py",)),
    ("examples", ("*.py", "*.conf", "*.md")),
    ("singa_core/commands/scaffold_templates", ("*.tmpl",)),
    ("docs", ("*.md",)),
    ("tests", ("*.py", "*.md")),
]
FILES = ["README.md", "CONTRIBUTING.md"]


def checked_files() -> list[Path]:
    found = [REPO / name for name in FILES]
    for tree, patterns in TREES:
        for pattern in patterns:
            found.extend((REPO / tree).rglob(pattern))
    return sorted(
        path for path in set(found) if path.relative_to(REPO).as_posix() not in CONTRACT_TESTS
    )


def inside_spellings(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8", errors="replace")
    return [
        f"{path.relative_to(REPO)}:{number}: {line.strip()}"
        for number, line in enumerate(text.splitlines(), 1)
        if INSIDE.search(line)
    ]


def test_the_scan_reads_the_trees_it_names():
    files = {path.relative_to(REPO).as_posix() for path in checked_files()}
    for expected in (
        "plugins/layers/dropout.py",
        "plugins/engines/inprocess.py",
        "singa_core/commands/scaffold_templates/layer/$package+plugin.py.tmpl",
        "docs/guide/gpu.md",
        "CONTRIBUTING.md",
        "tests/core/test_api.py",
    ):
        assert expected in files


@pytest.mark.parametrize(
    "line",
    [
        "from singa_core.contracts.layer import Layer",
        "from singa_core.contracts import device",
        "import singa_core.contracts.memory as memory",
        "(see ``singa_core.contracts.device``)",
    ],
)
def test_the_pattern_catches_every_form(line):
    assert INSIDE.search(line)


@pytest.mark.parametrize(
    "line",
    [
        "from singa_core.layer import Layer",
        "from singa_core import device",
        "`singa_core/contracts/standin.py`, the CPU behind CuPy's rules",
    ],
)
def test_the_pattern_spares_public_paths_and_file_paths(line):
    assert not INSIDE.search(line)


def test_nothing_outside_the_core_spells_the_contracts_inside():
    offenders = [hit for path in checked_files() for hit in inside_spellings(path)]
    assert offenders == [], (
        "import the plugin API by its public paths (singa_core.layer, singa_core.device, ...; "
        "docs/architecture.md 'Plugin API 1.0 paths'):\n" + "\n".join(offenders)
    )
