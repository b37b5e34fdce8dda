"""Docs that run (issue 42, point 7): every Python block in README.md, CONTRIBUTING.md and
docs/guide/*.md is run by a test.

A block either appears verbatim (a contiguous run of lines, after dedent: a method's body
may be shown alone) in a file under docs/examples/ or examples/, or is run straight from
its page by the test named in RUN_FROM_THE_PAGE. CONTRIBUTING's ``.proto`` blocks are
held to the same. The example files are ruff-clean under the project's rules, and
docs/examples/ runs: its plugin distributions' ``.proto`` files are compiled with ``singa
compile-proto`` in a copy and their tests run there (docs/examples/conftest.py registers
them as installed), so a wrong example fails."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import invoke_singa, need_extra

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "docs" / "examples"
PAGES = [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted(REPO.glob("docs/guide/*.md"))]

# (page, section heading) -> the test that runs that section's Python blocks from the page
RUN_FROM_THE_PAGE = {
    (
        "CONTRIBUTING.md",
        "A layer with its own GPU kernel",
    ): "tests/core/test_docs_kernel_example.py",  # noqa: E501
    ("docs/guide/python-api.md", "The Python API"): "tests/core/test_api.py",
}
# (page, section heading) -> why no test runs it yet (each a known gap: keep this short)
NOT_RUN_YET: dict[tuple[str, str], str] = {}


def blocks(page: Path, langs=("python",)) -> list[tuple[str, str, int, str]]:
    """(page, section heading, line, dedented text) of each fenced block in ``langs``."""
    out, heading, fence = [], "", None
    lines = page.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines, 1):
        if fence is None:
            if line.startswith("#"):
                heading = line.lstrip("#").strip()
            m = re.match(r"^(\s*)```(\w*)\s*$", line)
            if m and m.group(2):
                fence, start, body = m.group(2), number, []
            elif m:
                fence, start, body = "", number, []
        elif line.strip() == "```":
            if fence in langs:
                text = textwrap.dedent("\n".join(body)).strip("\n")
                out.append((page.relative_to(REPO).as_posix(), heading, start, text))
            fence = None
        else:
            body.append(line)
    return out


def is_excerpt(block: str, text: str) -> bool:
    """Whether ``block``'s lines are a contiguous run of ``text``'s, all under one indent."""
    want, have = block.splitlines(), text.splitlines()
    first = want[0]
    for i, line in enumerate(have):
        if not line.endswith(first) or line[: len(line) - len(first)].strip():
            continue
        indent = line[: len(line) - len(first)]
        window = have[i : i + len(want)]
        if len(window) == len(want) and all(
            (h.strip() == "" if w.strip() == "" else h == indent + w)
            for w, h in zip(want, window, strict=True)
        ):
            return True
    return False


def example_files() -> list[Path]:
    found = [*EXAMPLES.rglob("*.py"), *EXAMPLES.rglob("*.proto"), *EXAMPLES.rglob("*.toml")]
    found += [*(REPO / "examples").rglob("*.py"), *(REPO / "examples").rglob("*.proto")]
    return sorted(p for p in found if not p.name.endswith("_pb2.py"))


def test_the_excerpt_matcher():
    text = "class A:\n    def f(self):\n        x = 1\n\n        return x\n"
    assert is_excerpt("x = 1\n\nreturn x", text)
    assert is_excerpt("def f(self):\n    x = 1", text)
    assert not is_excerpt("x = 1\nreturn x", text)  # not contiguous
    assert not is_excerpt("x = 2", text)


def test_every_python_block_is_run():
    texts = {path: path.read_text(encoding="utf-8") for path in example_files()}
    missing = []
    found = [b for page in PAGES for b in blocks(page)]
    found += blocks(REPO / "CONTRIBUTING.md", ("proto",))
    for page, heading, line, text in found:
        if (page, heading) in RUN_FROM_THE_PAGE or (page, heading) in NOT_RUN_YET:
            continue
        if not any(is_excerpt(text, t) for t in texts.values()):
            missing.append(f"{page}:{line} (under '{heading}')")
    assert missing == [], (
        "these blocks are in no file under docs/examples/ or examples/ (keep the whole "
        "example there, with a test, and show it verbatim): " + ", ".join(missing)
    )
    assert len(found) >= 25
    sections = {(page, heading) for page, heading, _, _ in found}
    for key, test in RUN_FROM_THE_PAGE.items():
        assert key in sections, f"{key}: no Python block there any more"
        assert Path(key[0]).name in (REPO / test).read_text(), f"{test} does not read {key[0]}"
    assert set(NOT_RUN_YET) <= sections, "a gap was closed: remove it from NOT_RUN_YET"


def test_the_examples_are_ruff_clean():
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed")
    done = subprocess.run(
        [ruff, "check", "--select", "E,F,W,I,B,UP", "--line-length", "100", str(EXAMPLES)],
        cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.slow
def test_the_example_distributions_tests_pass(tmp_path):
    need_extra("grpc_tools")
    copy = tmp_path / "examples"
    ignore = shutil.ignore_patterns("__pycache__", "*_pb2.py", "build", "*.egg-info")
    shutil.copytree(EXAMPLES, copy, ignore=ignore)
    for proto in sorted(copy.glob("*/*/*.proto")):
        dist = proto.parents[1]
        res = invoke_singa("compile-proto", proto, "--out", dist, "-I", dist)
        assert res.exit_code == 0, res.output
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
         "-p", "no:benchmark", "--rootdir", str(copy), str(copy)],
        cwd=copy, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert " passed" in done.stdout and "skipped" not in done.stdout, done.stdout[-2000:]
