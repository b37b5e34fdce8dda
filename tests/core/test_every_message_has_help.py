"""One error form everywhere (issue 46, point 3): every user error singa or a built-in
plugin can raise carries a ``help:`` line, and every error the command line prints is
``WHERE: error: WHAT`` plus ``help:``, click's own parse errors included.

The first test walks every raise site (by AST, over ``singa_core/`` and ``plugins/``):
each construction of a :class:`SingaError` (or a subclass), and each call of a helper
that builds one from a ``help`` parameter (``Layer.error``), must pass ``help=`` with
something other than None or "". The others run the messages the issue found without a
place or a help line."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest
from conftest import REPO, invoke_singa

ROOTS = ("singa_core", "plugins")


def _trees() -> dict[Path, ast.Module]:
    return {
        p: ast.parse(p.read_text(encoding="utf-8"), str(p))
        for root in ROOTS
        for p in sorted((REPO / root).rglob("*.py"))
    }


def _name(node) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _error_classes(trees) -> set[str]:
    """SingaError and every class deriving from it (by name, transitively)."""
    names = {"SingaError"}
    grew = True
    while grew:
        grew = False
        for tree in trees.values():
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef) and node.name not in names:
                    if any(_name(b) in names for b in node.bases):
                        names.add(node.name)
                        grew = True
    return names


def _helpers(trees, classes) -> set[str]:
    """Functions with a ``help`` parameter that hand it to an error class (``help=help``):
    a call of one without ``help=`` makes a message without help."""
    found = set()
    for tree in trees.values():
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef):
                continue
            if "help" not in {a.arg for a in fn.args.args + fn.args.kwonlyargs}:
                continue
            for call in ast.walk(fn):
                if isinstance(call, ast.Call) and _name(call.func) in classes:
                    if any(
                        k.arg == "help" and isinstance(k.value, ast.Name) and k.value.id == "help"
                        for k in call.keywords
                    ):
                        found.add(fn.name)
    return found


def _sites_without_help(trees) -> list[str]:
    classes = _error_classes(trees)
    helpers = _helpers(trees, classes)
    bad = []
    for path, tree in trees.items():
        for call in ast.walk(tree):
            if not isinstance(call, ast.Call) or _name(call.func) not in classes | helpers:
                continue
            given = {k.arg: k.value for k in call.keywords}
            if None in given:  # **kwargs: cannot be told here
                continue
            value = given.get("help")
            empty = isinstance(value, ast.Constant) and value.value in (None, "")
            if value is None or empty:
                bad.append(f"{path.relative_to(REPO)}:{call.lineno}: {_name(call.func)}(...)")
    return bad


def test_every_raise_site_gives_a_help_line():
    trees = _trees()
    classes = _error_classes(trees)
    assert {"SingaError", "DamagedRecord", "NonFiniteError"} <= classes
    assert "error" in _helpers(trees, classes)  # Layer.error: the layers' checks
    bad = _sites_without_help(trees)
    assert not bad, "messages without help:\n" + "\n".join(bad)


def test_the_walk_finds_a_site_without_help(tmp_path):
    tree = ast.parse(
        "class MyError(SingaError):\n    pass\n"
        "def f():\n    raise MyError('x', where='y')\n"
        "def g(layer):\n    raise layer.error('x', field='f')\n"
        "def h():\n    raise SingaError('x', help=None)\n"
        "def error(self, message, *, help=None):\n    return SingaError(message, help=help)\n"
    )
    bad = _sites_without_help({REPO / "plugins" / "x.py": tree})
    assert [b.split(": ", 1)[0] for b in bad] == [
        "plugins/x.py:4",
        "plugins/x.py:6",
        "plugins/x.py:8",
    ]


def _one_form(res, where: str) -> None:
    assert res.exit_code == 2, res.output
    lines = res.output.splitlines()
    assert lines[0].startswith(f"{where}: error: "), res.output
    assert any(line.startswith("help: ") for line in lines), res.output
    assert "Usage:" not in res.output and "Traceback" not in res.output


@pytest.mark.parametrize(
    ("args", "where"),
    [
        (["data", "mnist"], "singa data --out"),  # Missing option
        (["data"], "singa data NAME"),  # Missing argument
        (["train", "x.conf", "--engin", "shm"], "singa train --engin"),  # No such option
        (["predict", "x.conf", "y.npy", "--top-k", "abc"], "singa predict --top-k"),  # bad int
        (["train", "x.conf", "--seed"], "singa train --seed"),  # requires an argument
        (["train", "x.conf", "extra"], "singa train"),  # unexpected extra argument
        (["trian"], "singa"),  # no such command
        (["export", "x.conf", "--out", "m", "--format", "zip"], "--format"),  # singa's own
        (["predict", "x.conf", "y.npy", "--top-k", "1.5"], "singa predict --top-k"),
    ],
)
def test_click_s_own_errors_take_the_one_form(args, where):
    res = invoke_singa(*args)
    _one_form(res, where)


def test_the_suggestion_of_a_mistyped_option_or_command_is_the_help():
    res = invoke_singa("train", "x.conf", "--engin", "shm")
    assert res.output.splitlines()[-1] == "help: did you mean --engine or --engine-option?"
    res = invoke_singa("trian")
    assert "did you mean 'train'?" in res.output.splitlines()[-1]


def test_errors_the_issue_found_without_a_place(tmp_path):
    from singa_core.testing import blobs_csv, mlp_job

    conf = tmp_path / "job.conf"
    conf.write_text(mlp_job(blobs_csv(tmp_path / "b.csv", n=40), steps=2))
    ws = tmp_path / "ws"
    res = invoke_singa("train", conf, "--workspace", ws, "--engine", str(tmp_path / "blobs.csv"))
    _one_form(res, "--engine")
    assert 'unknown engine type "' in res.output
    res = invoke_singa("train", tmp_path / "é")
    _one_form(res, str(tmp_path / "é"))
    res = invoke_singa("data", "bogus", "--out", tmp_path / "out")
    _one_form(res, "singa data bogus")
    fifo = tmp_path / "fifo.conf"
    os.mkfifo(fifo)
    res = invoke_singa("train", fifo)  # refused at once, not read until a writer comes
    _one_form(res, str(fifo))
    assert "is a named pipe, not a file" in res.output


def test_an_error_that_names_no_place_is_located_at_its_command(monkeypatch, tmp_path):
    from singa_core.errors import SingaError
    from singa_core.plugin_host import host as host_module

    def fail():
        raise SingaError("something went wrong")

    monkeypatch.setattr(host_module, "get_host", fail)
    res = invoke_singa("list-plugins")
    assert res.exit_code == 2, res.output
    assert res.output.splitlines()[0] == "singa list-plugins: error: something went wrong"
    assert (
        res.output.splitlines()[-1]
        == "help: `singa list-plugins -h` shows its arguments and options"
    )
