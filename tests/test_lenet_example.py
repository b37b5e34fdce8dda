"""End to end: SINGA's MNIST LeNet example (examples/mnist/conv.conf), shortened to 500
steps, on real MNIST; evaluated on all 10,000 test images."""

from __future__ import annotations

import pytest
from conftest import REPO, full_test_accuracy, mnist_example_args
from typer.testing import CliRunner

from singa_core.cli import app

runner = CliRunner()


@pytest.mark.slow
def test_lenet_example_learns(mnist_stores, tmp_path):
    conf = REPO / "examples" / "mnist" / "conv.conf"
    paths = mnist_example_args(mnist_stores)
    ws = tmp_path / "ws"
    short = ["-o", "train_steps=500", "-o", "test_steps=10", "-o", "test_freq=250"]
    res = runner.invoke(
        app, ["train", str(conf), "--seed", "0", "--workspace", str(ws), *paths, *short]
    )
    assert res.exit_code == 0, res.output
    assert "Test step-250, " in res.output and "Train step-450, " in res.output
    acc = full_test_accuracy(runner, app, conf, ws, paths)
    assert acc >= 0.95, acc  # PyTorch with the same config and steps: about 0.97
