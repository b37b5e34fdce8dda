"""End to end: SINGA's MNIST MLP example, unchanged but for data paths, on real MNIST."""

from __future__ import annotations

import json

import pytest
from conftest import REPO, full_test_accuracy, mnist_example_args
from typer.testing import CliRunner

from singa_core.commands.cli import app

runner = CliRunner()


@pytest.mark.slow
def test_mnist_mlp_example_learns(mnist_stores, tmp_path):
    conf = REPO / "examples" / "mnist" / "job.conf"
    paths = mnist_example_args(mnist_stores)
    ws = tmp_path / "ws"
    res = runner.invoke(app, ["train", str(conf), "--seed", "0", "--workspace", str(ws), *paths])
    assert res.exit_code == 0, res.output
    assert "Test step-0, " in res.output and "Train step-990, " in res.output
    # evaluate the final checkpoint on all 10,000 test images
    acc = full_test_accuracy(runner, app, conf, ws, paths)
    assert 0.87 <= acc <= 0.93, acc  # SINGA 0.3: 0.8915-0.8958; PyTorch: 0.891-0.894
    records = [json.loads(x) for x in (ws / "metrics.jsonl").read_text().splitlines()]
    train_lines = [r for r in records if r.get("phase") == "train"]
    first, last = train_lines[0], train_lines[-1]
    assert last["loss"] < first["loss"]
