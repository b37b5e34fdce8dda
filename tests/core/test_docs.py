"""The user docs hold together: every relative link in README.md, CONTRIBUTING.md, docs/
and the examples' READMEs leads to a file that exists (and to a heading there, for a
``#anchor``); the README stays short enough to read in five minutes and starts with the
two set-up commands, the second of which is what .ci/run runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = sorted(
    [
        REPO / "README.md",
        REPO / "CONTRIBUTING.md",
        *REPO.glob("docs/**/*.md"),
        *REPO.glob("examples/*/README.md"),
    ]
)
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"```.*?```", re.S)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = _FENCE.sub("", path.read_text(encoding="utf-8"))
    return {slug(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", text, re.M)}


def links(path: Path):
    text = _FENCE.sub("", path.read_text(encoding="utf-8"))
    for m in _LINK.finditer(text):
        target = m.group(1)
        if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
            continue
        yield target


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(REPO)) for d in DOCS])
def test_relative_links_resolve(doc):
    broken = []
    for target in links(doc):
        file, _, anchor = target.partition("#")
        dest = (doc.parent / file).resolve() if file else doc
        if not dest.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target} (no heading #{anchor})")
    assert broken == [], f"{doc.relative_to(REPO)}: broken links: {broken}"


def test_the_checker_sees_a_broken_link(tmp_path):
    doc = tmp_path / "a.md"
    doc.write_text("# Title\n[ok](a.md#title) [bad](b.md) [x](https://example.org)\n")
    assert list(links(doc)) == ["a.md#title", "b.md"]
    assert "title" in anchors(doc)


def test_readme_is_short_and_starts_with_the_two_commands():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) < 150
    block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [line for line in block.splitlines() if line and not line.startswith("#")]
    assert len(commands) == 2
    assert "singa train examples/mnist/job.conf" in commands[0]
    assert "[test]" not in commands[0]  # the main job installs no test tools
    test_command = commands[1].split("&&")[-1].strip()
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert ci.rstrip().splitlines()[-1].strip() == test_command


def test_every_guide_page_is_in_the_index():
    index = (REPO / "docs" / "guide" / "README.md").read_text(encoding="utf-8")
    pages = {p.name for p in (REPO / "docs" / "guide").glob("*.md")} - {"README.md"}
    assert {p for p in pages if f"({p})" not in index} == set()
