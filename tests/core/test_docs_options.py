"""The docs have one source for every command's options: the command's own --help.

Every ``--option`` the docs show after ``singa COMMAND`` (in code spans and code blocks of
README.md, CONTRIBUTING.md, docs/ and the examples' READMEs) must be an option of that
command as ``singa COMMAND --help`` lists it (tests/core/help_snapshots/, kept equal to the
real help by test_help_snapshots.py; ``singa data NAME``: also the converter's own
options); and docs/guide/options.md is every command's --help, generated from the same
snapshots (``SINGA_UPDATE_HELP=1`` rewrites it with them)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from singa_core.plugin_host.host import get_host

REPO = Path(__file__).resolve().parents[2]
SNAPSHOTS = REPO / "tests" / "core" / "help_snapshots"
OPTIONS_PAGE = REPO / "docs" / "guide" / "options.md"
DOCS = sorted(
    [
        REPO / "README.md",
        REPO / "CONTRIBUTING.md",
        *REPO.glob("docs/**/*.md"),
        *REPO.glob("examples/*/README.md"),
    ]
)
_OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")
_CODE = re.compile(r"```.*?```|`[^`\n]+`", re.S)
_SINGA = re.compile(r"\bsinga ([a-z][a-z-]*)((?: [^\s`;|&#]+)*)")


_OPTION_LINE = re.compile(
    r"^  (?:(-[a-zA-Z])(?:, |\s))?(--[a-z][a-z0-9-]*)?(?: / (--[a-z][a-z0-9-]*))?"
)


def option_groups(help_text: str) -> list[frozenset[str]]:
    """The options an Options section lists, each with its other spellings (``-o``,
    ``--override``; ``--tensorboard``, ``--no-tensorboard``)."""
    groups = []
    for line in help_text.splitlines():
        m = _OPTION_LINE.match(line)
        if m and (m.group(1) or m.group(2)):
            groups.append(frozenset(x for x in m.groups() if x))
    return groups


def _converter_options() -> set[str]:
    host = get_host()
    found = set()
    for name in host.registry("dataset").names():
        found |= set(_OPTION.findall(host.get("dataset", name)().options_help()))
    return found


def command_groups() -> dict[str, list[frozenset[str]]]:
    """Command -> its options as --help lists them (``data``: and every converter's)."""
    out = {}
    for snap in SNAPSHOTS.glob("*.txt"):
        if snap.stem != "singa":
            out[snap.stem] = option_groups(snap.read_text())
    out["data"] += [frozenset({o}) for o in sorted(_converter_options())]
    return out


def commands() -> dict[str, set[str]]:
    """Command -> every spelling of its options (``singa submit JOB.conf`` also takes every
    option of ``singa train``)."""
    out = {cmd: set().union(*groups) for cmd, groups in command_groups().items()}
    if "submit" in out and "train" in out:
        out["submit"] |= out["train"]
    return out


def mentions(path: Path):
    """(line number, command, option) for every option shown after `singa COMMAND`."""
    text = path.read_text(encoding="utf-8")
    for block in _CODE.finditer(text):
        start = text.count("\n", 0, block.start()) + 1
        for k, line in enumerate(block.group(0).splitlines()):
            for m in _SINGA.finditer(line):
                for opt in _OPTION.findall(m.group(2)):
                    yield start + k, m.group(1), opt


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(REPO)) for d in DOCS])
def test_options_in_the_docs_are_the_commands_own(doc):
    known = commands()
    wrong = [
        f"{doc.relative_to(REPO)}:{line}: singa {cmd} {opt}"
        for line, cmd, opt in mentions(doc)
        if cmd in known and opt not in known[cmd]
    ]
    assert wrong == [], "options the command does not have: " + "; ".join(wrong)


def test_the_checker_sees_an_option_a_command_lacks(tmp_path):
    page = tmp_path / "x.md"
    page.write_text(
        "Run `singa plot ws --metric loss --smooth 3` or\n```\nsinga time a.conf --warm 2\n```\n"
    )
    found = [(cmd, opt) for _, cmd, opt in mentions(page)]
    assert found == [("plot", "--metric"), ("plot", "--smooth"), ("time", "--warm")]
    known = commands()
    assert "--metric" in known["plot"] and "--smooth" not in known["plot"]
    assert "--warmup" in known["time"] and "--warm" not in known["time"]
    assert "--val-fraction" in known["data"]


def options_page() -> str:
    parts = [
        "# Every command's options\n",
        "Each command's `--help`, exactly as it prints it (generated from",
        "`tests/core/help_snapshots/`, which a test keeps equal to the real help; the other pages",
        "show options only as `--help` names them). `singa data NAME --help` adds the",
        "converter's own options ([data.md](data.md)).\n",
    ]
    order = ["singa"] + sorted(p.stem for p in SNAPSHOTS.glob("*.txt") if p.stem != "singa")
    for name in order:
        title = "singa" if name == "singa" else f"singa {name}"
        parts.append(f"## {title}\n")
        parts.append("```text\n" + (SNAPSHOTS / f"{name}.txt").read_text().rstrip() + "\n```\n")
    host = get_host()
    for name in sorted(host.registry("dataset").names()):
        own = host.get("dataset", name)().options_help()
        if own:
            parts.append(f"## singa data {name}\n")
            parts.append("Besides `--out` and `--from`:\n")
            parts.append("```text\n" + own.rstrip() + "\n```\n")
    return "\n".join(parts)


def test_the_options_page_is_the_help():
    want = options_page()
    if os.environ.get("SINGA_UPDATE_HELP"):
        OPTIONS_PAGE.write_text(want)
    assert OPTIONS_PAGE.read_text() == want, (
        "docs/guide/options.md differs from the help snapshots: regenerate with "
        "SINGA_UPDATE_HELP=1 python -m pytest -q tests/core/test_docs_options.py"
    )


def synopsis() -> dict[str, set[str]]:
    """Command -> the options the synopsis at the top of docs/guide/commands.md shows (a
    command's line and the indented lines after it)."""
    text = (REPO / "docs" / "guide" / "commands.md").read_text()
    block = re.search(r"```text\n(.*?)```", text, re.S).group(1)
    out: dict[str, set[str]] = {}
    current = None
    for line in block.splitlines():
        m = re.match(r"singa ([a-z][a-z-]*)", line)
        if m:
            current = m.group(1)
            out.setdefault(current, set())
        if current:
            code = line.split("#")[0]
            out[current] |= set(_OPTION.findall(code)) | set(
                re.findall(r"(?<![\w-])(-[a-zA-Z])\b", code)
            )
    return out


def test_the_commands_synopsis_lists_every_option():
    """The synopsis at the top of commands.md shows every option of every command (a
    converter's own are on `singa data NAME --help` and in options.md)."""
    shown = synopsis()
    missing, extra = {}, {}
    for cmd, groups in command_groups().items():
        if cmd == "version":
            continue
        assert cmd in shown, f"singa {cmd} is not in the synopsis"
        converters = _converter_options() if cmd == "data" else set()
        lacking = [sorted(g)[-1] for g in groups if "--help" not in g and not g & shown[cmd]]
        lacking = [o for o in lacking if o not in converters]
        if lacking:
            missing[cmd] = lacking
        unknown = sorted(shown[cmd] - set().union(*groups))
        if unknown:
            extra[cmd] = unknown
    assert missing == {}, "options the synopsis leaves out"
    assert extra == {}, "options the command does not have"


# -- option values -------------------------------------------------------------------------
_ENUM = re.compile(r"^[A-Za-z][\w.-]*(?:\|[A-Za-z][\w.-]*)+$")  # group|spread|pack
_LISTED = re.compile(r"^([a-z][\w-]*(?:, [a-z][\w-]*)* or [a-z][\w-]*)$")  # a, b or c


def option_values(help_text: str) -> dict[str, set[str]]:
    """Option -> the values its --help enumerates: in the metavar (``--placement
    group|spread|pack``) or as the whole help text (``--kind KIND  layer, worker ... or
    dataset``)."""
    found: dict[str, set[str]] = {}
    current, words = None, []

    def close():
        if current is not None and current not in found:
            text = re.sub(r"\s*\[(?:required|default: [^\]]*)\]", "", " ".join(words))
            m = _LISTED.match(text.strip())
            if m:
                found[current] = set(re.split(r", | or ", m.group(1)))

    for line in help_text.splitlines():
        m = re.match(r"^  (?:-[a-zA-Z], )?(--[a-z][a-z0-9-]*)(?: (\S+))?\s*(.*)$", line)
        if m:
            close()
            current, words = m.group(1), [m.group(3)] if m.group(3) else []
            if m.group(2) and _ENUM.match(m.group(2)):
                found[current] = set(m.group(2).split("|"))
        elif current is not None and line.startswith("    ") and line.strip():
            words.append(line.strip())
        else:
            close()
            current, words = None, []
    close()
    return found


def command_values() -> dict[str, dict[str, set[str]]]:
    out = {}
    for snap in SNAPSHOTS.glob("*.txt"):
        if snap.stem != "singa":
            out[snap.stem] = option_values(snap.read_text())
    if "submit" in out and "train" in out:
        out["submit"] = {**out["train"], **out["submit"]}
    return out


def value_mentions(path: Path):
    """(line, command, option, value) for every value the docs show after an option of
    `singa COMMAND` (code spans and blocks; a block's indented lines continue the command
    of the line above, as in the synopsis of commands.md)."""
    text = path.read_text(encoding="utf-8")
    for block in _CODE.finditer(text):
        start = text.count("\n", 0, block.start()) + 1
        current = None
        for k, line in enumerate(block.group(0).splitlines()):
            m = _SINGA.search(line)
            if m:
                current, rest = m.group(1), m.group(2)
            elif current is not None and line.startswith(" ") and line.strip():
                rest = line
            else:
                current = None
                continue
            rest = rest.split("#")[0]
            for o in re.finditer(r"(?<![\w-])(--[a-z][a-z0-9-]*)[ =]([^\s\]\[`]+)", rest):
                yield start + k, current, o.group(1), o.group(2)


def wrong_values(path: Path, known: dict[str, dict[str, set[str]]]) -> list[str]:
    wrong = []
    for line, cmd, opt, value in value_mentions(path):
        allowed = known.get(cmd, {}).get(opt)
        if allowed is None or value.startswith("-"):
            continue
        shown = set(value.split("|"))
        if "|" in value:
            bad = shown != allowed  # a list of the values: all of them, no others
        else:
            bad = value not in allowed and not value.isupper()  # a value, or a placeholder
        if bad:
            where = f"{path.relative_to(REPO) if path.is_relative_to(REPO) else path.name}"
            wrong.append(
                f"{where}:{line}: singa {cmd} {opt} {value} (--help: {'|'.join(sorted(allowed))})"
            )
    return wrong


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(REPO)) for d in DOCS])
def test_option_values_in_the_docs_are_the_helps(doc):
    """`--placement spread|pack` in a doc where --help says `group|spread|pack` fails; so
    does `--layout NWHC` or `--kind model`."""
    wrong = wrong_values(doc, command_values())
    assert wrong == [], "values the option does not take (or a list lacking some): " + "; ".join(
        wrong
    )


def test_the_value_checker_sees_wrong_and_partial_lists(tmp_path):
    known = command_values()
    assert known["train"]["--placement"] == {"group", "spread", "pack"}
    assert known["predict"]["--layout"] == {"NCHW", "NHWC"}
    assert "dataset" in known["new-plugin"]["--kind"] and "layer" in known["new-plugin"]["--kind"]
    page = tmp_path / "x.md"
    page.write_text(
        "```text\nsinga train JOB.conf [--seed N]\n"
        "                     [--placement spread|pack] [--max-restarts N]\n```\n"
        "and `singa new-plugin foo --kind model` but `singa export a.conf --format onnx`, "
        "`singa predict a.conf x.npy --layout NHWC` and `singa train a.conf --placement group`\n"
    )
    wrong = wrong_values(page, known)
    assert len(wrong) == 2, wrong
    assert "singa train --placement spread|pack" in wrong[0]
    assert "singa new-plugin --kind model" in wrong[1]
