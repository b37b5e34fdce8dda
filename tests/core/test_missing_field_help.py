"""A field left out is named, and its `help:` shows the line to add (issue 38 point 7): a
store shape left out read `record … has 784 pixel values, expected 1 (store_conf.shape [])`
with no help."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from singa_core.commands.cli import app

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]


def _refused(res) -> tuple[str, str]:
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    lines = res.output.splitlines()
    error = next(line for line in lines if ": error: " in line)
    help_ = next(line for line in lines if line.startswith("help: "))
    return error, help_


def test_mnist_without_its_store_shape(mnist_stores, tmp_path):
    text = (REPO / "examples" / "mnist" / "job.conf").read_text()
    text = text.replace("examples/mnist/", f"{mnist_stores}/").replace("shape: 784\n", "")
    conf = tmp_path / "job.conf"
    conf.write_text(text)
    error, help_ = _refused(runner.invoke(app, ["train", str(conf), "--dry-run"]))
    assert "has 784 pixel values, but store_conf.shape is not set" in error
    assert error.startswith(f"{conf}:29:")  # the train layer's store_conf, as written
    assert help_ == (
        "help: add `shape: 784` to store_conf (one record's dimensions, e.g. `shape: 1 "
        "shape: 28 shape: 28` for 28x28 grey images)"
    )


def test_csv_without_its_store_shape(tmp_path):
    from conftest import mlp_conf, write_csv_blobs

    text = mlp_conf(write_csv_blobs(tmp_path / "b.csv"), tmp_path / "ws", steps=2)
    assert text.count(" shape: 4") == 1
    conf = tmp_path / "job.conf"
    conf.write_text(text.replace(" shape: 4", ""))
    error, help_ = _refused(runner.invoke(app, ["train", str(conf), "--dry-run"]))
    assert "has 4 values after its label, but store_conf.shape is not set" in error
    assert help_.startswith("help: add `shape: 4` to store_conf")


def test_a_shape_that_does_not_match_says_the_records_count(tmp_path):
    from conftest import mlp_conf, write_csv_blobs

    conf = tmp_path / "job.conf"
    conf.write_text(mlp_conf(write_csv_blobs(tmp_path / "b.csv"), tmp_path / "ws", steps=2))
    res = runner.invoke(
        app, ["train", str(conf), "--dry-run", "-o", "neuralnet.layer[0].store_conf.shape=3"]
    )
    error, help_ = _refused(res)
    assert "has 5 fields, expected a label and 3 values (store_conf.shape [3])" in error
    assert "4 values after its label a record, e.g. `shape: 4`" in help_


def test_a_store_path_left_out(tmp_path):
    from conftest import mlp_conf, write_csv_blobs

    text = mlp_conf(write_csv_blobs(tmp_path / "b.csv"), tmp_path / "ws", steps=2)
    conf = tmp_path / "job.conf"
    path = str(tmp_path / "b.csv")
    conf.write_text(text.replace(f'path: "{path}" ', ""))
    error, help_ = _refused(runner.invoke(app, ["train", str(conf), "--dry-run"]))
    assert "store_conf.path is not set" in error
    assert help_.startswith('help: add `path: "..."` to store_conf')
