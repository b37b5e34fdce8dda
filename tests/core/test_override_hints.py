"""`-o` mistakes get a FIELD=VALUE hint (issue 38 point 7): a value of the wrong type names
the field's type and the line to write, not protobuf's advice on text format; a space
instead of `=` (click's "unexpected extra argument") names the word to write."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from singa_core.commands.cli import app

runner = CliRunner()
ONE_WORD = "an override must look like FIELD=VALUE, one word"


@pytest.fixture
def conf(tmp_path):
    from conftest import mlp_conf, write_csv_blobs

    path = tmp_path / "job.conf"
    path.write_text(mlp_conf(write_csv_blobs(tmp_path / "b.csv"), tmp_path / "ws", steps=2))
    return path


def _error(res) -> tuple[str, str]:
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output and "Usage:" not in res.output, res.output
    lines = res.output.splitlines()
    error = next(line for line in lines if ": error: " in line)
    help_ = next(line for line in lines if line.startswith("help: "))
    return error, help_


@pytest.mark.parametrize(
    ("override", "hint"),
    [
        (
            "train_steps=abc",
            "train_steps takes a whole number up to 2,147,483,647: -o train_steps=100",
        ),
        ("train_steps=1e99", "-o train_steps=100"),
        ("updater.momentum=fast", "updater.momentum takes a number: -o updater.momentum=0.5"),
        ("cluster.share_memory=maybe", "takes true or false: -o cluster.share_memory=true"),
        (
            "neuralnet.layer[0].store_conf.shape=a,b",
            "takes a whole number up to 2,147,483,647, a list separated by commas: "
            "-o neuralnet.layer[0].store_conf.shape=100,100",
        ),
    ],
)
def test_a_value_of_the_wrong_type_gets_the_field_value_line(conf, override, hint):
    error, help_ = _error(runner.invoke(app, ["train", str(conf), "-o", override, "--dry-run"]))
    assert error.startswith(f"command line: -o {override}: error: ")
    assert hint in help_
    assert "protobuf text format" not in help_


def test_an_unknown_enum_value_keeps_its_valid_values(conf):
    _, help_ = _error(runner.invoke(app, ["train", str(conf), "-o", "updater.type=kFoo"]))
    assert "kSGD" in help_


@pytest.mark.parametrize(
    ("words", "shown", "hint"),
    [
        (["-o", "train_steps", "100"], "-o train_steps 100", "write -o train_steps=100"),
        (["-o", "train_steps", "=", "100"], "-o train_steps = 100", "write -o train_steps=100"),
        (["-o", "train_steps", "=100"], "-o train_steps =100", "write -o train_steps=100"),
        (["--override", "train_steps", "7"], "-o train_steps 7", "write -o train_steps=7"),
        (["-otrain_steps", "7"], "-o train_steps 7", "write -o train_steps=7"),
        (
            ["-o", "updater.learning_rate.base_lr", "-0.5"],
            "-o updater.learning_rate.base_lr -0.5",
            "write -o updater.learning_rate.base_lr=-0.5",
        ),
        (["-o", "train_steps", "-q"], "-o train_steps", "write -o train_steps=VALUE"),
        (["-o", "train_steps"], "-o train_steps", "write -o train_steps=VALUE"),
    ],
)
@pytest.mark.parametrize("command", ["train", "test", "predict", "export", "time"])
def test_a_space_for_the_equals_sign_gets_the_word_to_write(conf, command, words, shown, hint):
    args = [command, str(conf), *words]
    if command == "export":
        args += ["--out", "m.onnx"]
    error, help_ = _error(runner.invoke(app, args))
    assert error == f"command line: {shown}: error: " + ONE_WORD
    assert help_.startswith(f"help: {hint}")


def test_good_overrides_still_pass(conf):
    res = runner.invoke(
        app, ["train", str(conf), "-o", "train_steps=3", "--override=disp_freq=1", "--dry-run"]
    )
    assert res.exit_code == 0, res.output


def test_submit_gets_the_same_hint(conf, tmp_path, monkeypatch):
    """`singa submit` passes train's options through as they are: the same check, before
    anything is started."""
    monkeypatch.setenv("SINGA_JOBS_DIR", str(tmp_path / "jobs"))
    res = runner.invoke(app, ["submit", str(conf), "-o", "train_steps", "100"])
    error, help_ = _error(res)
    assert error == "command line: -o train_steps 100: error: " + ONE_WORD
    assert help_ == "help: write -o train_steps=100 (no spaces around '=')"
    assert not (tmp_path / "jobs").exists() or not any((tmp_path / "jobs").iterdir())
