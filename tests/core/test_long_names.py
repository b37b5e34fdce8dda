"""Paths a command cannot use (issue 38 point 4): `singa plot` given a file, a device or a
FIFO instead of a workspace, and a 300-byte name (the filesystem's limit is 255) anywhere a
command takes a path. Every case is a located exit 2 with a `help:` line, no traceback."""

from __future__ import annotations

import os

import pytest
from typer.testing import CliRunner

from singa_core.commands.cli import app, name_too_long

runner = CliRunner()
LONG = "z" * 300


def _refused(res, where: str) -> str:
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    assert res.output.startswith(f"{where}: error: "), res.output
    assert "\nhelp: " in res.output
    return res.output


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from conftest import mlp_conf, write_csv_blobs

    root = tmp_path_factory.mktemp("longnames")
    conf = root / "job.conf"
    conf.write_text(mlp_conf(write_csv_blobs(root / "blobs.csv"), root / "ws", steps=10))
    res = runner.invoke(app, ["train", str(conf), "-q", "--no-tensorboard", "--seed", "1"])
    assert res.exit_code == 0, res.output
    (root / "in.csv").write_text("1,2,3,4\n")
    (root / "afile").write_text("x\n")
    os.mkfifo(root / "fifo")
    return root


# -- singa plot: inputs that are not workspaces ------------------------------------------------
@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("/dev/null", "is a device, not a workspace folder"),
        ("afile", "is a file, not a workspace folder"),
        ("fifo", "is a named pipe, not a workspace folder"),
        ("blobs.csv", "is a file, not a workspace folder"),
        ("afile/sub", "cannot be examined: Not a directory"),
    ],
)
@pytest.mark.parametrize("terminal", [True, False])
def test_plot_refuses_what_is_not_a_workspace(trained, monkeypatch, name, said, terminal):
    monkeypatch.chdir(trained)
    res = runner.invoke(app, ["plot", name, *(["--terminal"] if terminal else [])])
    assert said in _refused(res, name)


def test_plot_refuses_a_fifo_named_like_a_metrics_file(trained, monkeypatch):
    monkeypatch.chdir(trained)
    os.mkfifo(trained / "m.jsonl")
    try:
        text = _refused(runner.invoke(app, ["plot", "m.jsonl", "--terminal"]), "m.jsonl")
    finally:
        os.unlink(trained / "m.jsonl")
    assert "the metrics file is a named pipe" in text


def test_plot_still_reads_a_workspace(trained):
    res = runner.invoke(app, ["plot", str(trained / "ws"), "--terminal"])
    assert res.exit_code == 0, res.output


# -- a 300-byte name wherever a path is taken --------------------------------------------------
def _cases(root):
    conf = str(root / "job.conf")
    long_in_ws = str(root / "ws" / LONG)
    return [
        (["test", conf, "--checkpoint", LONG], "--checkpoint"),
        (["test", conf, f"--checkpoint={long_in_ws}"], "--checkpoint"),
        (["predict", conf, "in.csv", "--checkpoint", LONG], "--checkpoint"),
        (["export", conf, "--checkpoint", LONG, "--out", "m.onnx"], "--checkpoint"),
        (["train", LONG], None),
        (["test", LONG], None),
        (["time", LONG], None),
        (["submit", LONG], None),
        (["predict", conf, LONG], None),
        (["predict", conf, "in.csv", "--output", LONG], "--output"),
        (["predict", conf, "in.csv", "--labels", LONG], "--labels"),
        (["export", conf, "--out", LONG], "--out"),
        (["train", conf, "--workspace", LONG], "--workspace"),
        (["data", "images", LONG, "--out", "o"], None),
        (["data", "images", ".", "--out", LONG], "--out"),
        (["compile-proto", LONG], None),
        (["plot", LONG, "--terminal"], None),
        (["plot", "ws", "--out", LONG], "--out"),
        (["new-plugin", "foo", "--kind", "layer", "--out", LONG], None),
    ]


def test_a_name_too_long_is_a_located_error_everywhere(trained, monkeypatch):
    monkeypatch.chdir(trained)
    for args, where in _cases(trained):
        res = runner.invoke(app, args)
        assert res.exit_code == 2, (args, res.output)
        assert "Traceback" not in res.output, args
        first = next(line for line in res.output.splitlines() if ": error: " in line)
        # located at the option, or at the path holding the long name
        assert first.startswith(f"{where}: error: ") or (
            ": error: " in first and LONG[:40] in first.split(": error: ")[0]
        ), (args, res.output)
        assert "too long" in res.output.lower(), (args, res.output)
        assert "\nhelp: " in res.output, (args, res.output)


def test_name_too_long_names_the_option_holding_the_name():
    exc = OSError(36, "File name too long", f"/w/{LONG}/x")
    err = name_too_long(exc, ["test", "job.conf", "--checkpoint", f"/w/{LONG}/x"])
    assert str(err.where) == "--checkpoint"
    assert "(300 bytes)" in err.message and "255 bytes" in err.help
    err = name_too_long(exc, ["job.conf"])  # not on the command line: the path itself
    assert str(err.where).startswith(f"/w/{LONG[:30]}")


@pytest.mark.parametrize("out", [LONG, "afile/sub", "/dev/null", "fifo"])
def test_data_checks_out_before_looking_for_the_raw_files(trained, monkeypatch, out):
    """`singa data mnist --out X` with an X that cannot be a folder is refused before any
    download (it used to download first)."""
    from singa_core.commands import datasets

    def no_download(*a, **k):
        raise AssertionError("looked for the raw files before checking --out")

    monkeypatch.chdir(trained)
    monkeypatch.setattr(datasets, "find_raw_files", no_download)
    res = runner.invoke(app, ["data", "mnist", "--out", out])
    _refused(res, "--out")
    assert "cannot write into the output folder" in res.output
