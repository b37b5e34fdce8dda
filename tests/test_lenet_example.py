"""End to end: SINGA's MNIST LeNet example (examples/mnist/conv.conf), shortened to 500
steps, on real MNIST; evaluated on all 10,000 test images."""

from __future__ import annotations

import pytest
from conftest import REPO
from typer.testing import CliRunner

from singa_core.cli import app

runner = CliRunner()


@pytest.mark.slow
def test_lenet_example_learns(mnist_stores, tmp_path):
    conf = REPO / "examples" / "mnist" / "conv.conf"
    paths = [
        "-o",
        f"neuralnet.layer[0].store_conf.path={mnist_stores / 'train_data.bin'}",
        "-o",
        f"neuralnet.layer[1].store_conf.path={mnist_stores / 'test_data.bin'}",
    ]
    ws = tmp_path / "ws"
    short = ["-o", "train_steps=500", "-o", "test_steps=10", "-o", "test_freq=250"]
    res = runner.invoke(
        app, ["train", str(conf), "--seed", "0", "--workspace", str(ws), *paths, *short]
    )
    assert res.exit_code == 0, res.output
    assert "Test step-250, " in res.output and "Train step-450, " in res.output
    res = runner.invoke(
        app, ["test", str(conf), "--steps", "100", *paths, "-o", f"cluster.workspace={ws}"]
    )
    assert res.exit_code == 0, res.output
    acc = float(res.output.split("accuracy = ")[1].split()[0].rstrip(","))
    # PyTorch with the same config and steps: about 0.97
    assert acc >= 0.95, res.output
