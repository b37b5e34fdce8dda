"""`singa --help` and every command's `--help`, compared with the text stored in
tests/core/help_snapshots/ (one file per command, `singa.txt` for the top level).

After changing a command's options or help on purpose, regenerate the stored text and
review the diff:

    SINGA_UPDATE_HELP=1 python -m pytest tests/core/test_help_snapshots.py
    git diff tests/core/help_snapshots/
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from singa_core.commands.cli import app

SNAPSHOTS = Path(__file__).parent / "help_snapshots"
UPDATE = os.environ.get("SINGA_UPDATE_HELP") == "1"
COMMANDS = sorted(typer.main.get_command(app).commands)


def _help(args: list[str], monkeypatch) -> str:
    monkeypatch.setenv("COLUMNS", "100")  # the width help is wrapped to
    res = CliRunner().invoke(app, [*args, "--help"], prog_name="singa")
    assert res.exit_code == 0, res.output
    return res.output


@pytest.mark.parametrize("command", ["", *COMMANDS])
def test_help_matches_snapshot(command, monkeypatch):
    text = _help([command] if command else [], monkeypatch)
    path = SNAPSHOTS / f"{command or 'singa'}.txt"
    if UPDATE:
        SNAPSHOTS.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.exists(), (
        f"no stored help for `singa {command}`: SINGA_UPDATE_HELP=1 python -m pytest "
        "tests/core/test_help_snapshots.py"
    )
    assert text == path.read_text(), (
        f"`singa {command} --help` changed; if on purpose, regenerate the snapshots "
        "(SINGA_UPDATE_HELP=1, see this file's docstring) and review the diff"
    )


@pytest.mark.parametrize("command", ["", *COMMANDS])
def test_help_reads_like_a_well_kept_cli(command, monkeypatch):
    text = _help([command] if command else [], monkeypatch)
    assert text.startswith(f"Usage: singa {command + ' ' if command else ''}[OPTIONS]")
    for artefact in ("<bool>", "<str>", "<int>", "<path>", "<list", "{", "``"):
        assert artefact not in text, (artefact, text)
    lines = [x for x in text.splitlines() if x.strip()]
    assert len(lines) == len(set(lines)), text
    if command not in ("version",):
        assert "\nExamples:\n  singa " in text, f"`singa {command} --help` shows no examples"


def test_no_stale_snapshots():
    stored = {p.stem for p in SNAPSHOTS.glob("*.txt")}
    assert stored <= {"singa", *COMMANDS}, stored - {"singa", *COMMANDS}


def _commands(group, path=()):
    for name, cmd in sorted(getattr(group, "commands", {}).items()):
        yield (*path, name), cmd
        yield from _commands(cmd, (*path, name))


def test_every_option_is_spelled_as_its_help_says():
    """Options are lower-case --words (typer 0.27 turned an option declared only by a
    metavar equal to its upper-cased name into `--DEVICE`, so `--device` was refused)."""
    wrong = [
        (" ".join(path), opt)
        for path, cmd in _commands(typer.main.get_command(app))
        for param in cmd.params
        for opt in getattr(param, "opts", []) + getattr(param, "secondary_opts", [])
        if opt.startswith("--") and opt != opt.lower()
    ]
    assert not wrong, wrong
