"""One public spelling of the plugin API: outside the core, the contracts are imported by
their plugin API paths (``singa_core.layer``, ``singa_core.device``, ...), never as
``singa_core.contracts.*``, which stays the core's inside (docs/architecture.md, "Plugin
API 1.0 paths"). Plugins, examples, the scaffold's templates and the docs are read as text,
so a docstring or a code sample counts as much as an import; tests may reach the contracts
modules that have no public path (the stand-in, cuda_errors), never one that has."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# `singa_core.contracts.layer`, `import singa_core.contracts`, `from singa_core import contracts`
INSIDE = re.compile(r"singa_core\.contracts\b|from\s+singa_core\s+import\s+(?:\(\s*)?contracts\b")
# in tests: a contracts module that has a public path (`singa_core.contracts.device`, `from
# singa_core.contracts import device`); a test may reach the modules that have none
# (standin, cuda_errors), the core's inside that plugins never import
_NAMED = re.compile(r"singa_core\.contracts(?:\.(\w+)|\s+import\s+\(?\s*(\w+))")


def public_modules() -> set[str]:
    """The contracts modules with a plugin API path: singa_core/NAME.py aliasing them."""
    return {
        path.stem
        for path in (REPO / "singa_core").glob("*.py")
        if f"from singa_core.contracts import {path.stem} as _contract" in path.read_text()
    }


# the tests of the contracts themselves: they name both spellings on purpose
CONTRACT_TESTS = {
    "tests/core/test_plugin_api_paths.py",
    "tests/core/test_import_graph.py",
    "tests/core/test_public_spelling.py",
    "tests/test_devices.py",
    "tests/test_cupy_api.py",
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


def _spells_inside(line: str, in_tests: bool, public: set[str]) -> bool:
    if not in_tests:
        return bool(INSIDE.search(line))
    return any((m.group(1) or m.group(2)) in public for m in _NAMED.finditer(line))


def inside_spellings(path: Path, public: set[str] | None = None) -> list[str]:
    public = public_modules() if public is None else public
    in_tests = path.relative_to(REPO).parts[0] == "tests"
    text = path.read_text(encoding="utf-8", errors="replace")
    return [
        f"{path.relative_to(REPO)}:{number}: {line.strip()}"
        for number, line in enumerate(text.splitlines(), 1)
        if _spells_inside(line, in_tests, public)
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


def test_tests_may_reach_only_what_has_no_public_path():
    public = public_modules()
    assert {"layer", "device", "memory", "errors"} <= public and "standin" not in public
    assert _spells_inside("from singa_core.contracts.device import to_host", True, public)
    assert _spells_inside("from singa_core.contracts import layer", True, public)
    assert not _spells_inside("from singa_core.contracts import standin", True, public)
    assert not _spells_inside("from singa_core.contracts.cuda_errors import x", True, public)
    assert _spells_inside("from singa_core.contracts import standin", False, public)


def test_nothing_outside_the_core_spells_the_contracts_inside():
    public = public_modules()
    offenders = [hit for path in checked_files() for hit in inside_spellings(path, public)]
    assert offenders == [], (
        "import the plugin API by its public paths (singa_core.layer, singa_core.device, ...; "
        "docs/architecture.md 'Plugin API 1.0 paths'):\n" + "\n".join(offenders)
    )
