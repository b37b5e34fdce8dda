"""End to end: SINGA's MNIST LeNet example (examples/mnist/conv.conf), shortened to 500
steps, on real MNIST; evaluated on all 10,000 test images."""

from __future__ import annotations

import pytest
from conftest import REPO, full_test_accuracy, mnist_example_args
from typer.testing import CliRunner

from singa_core.commands.cli import app

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


@pytest.mark.parametrize("numba", ["0", "1"])
def test_lenet_resume_is_exact_on_both_pooling_paths(mnist_stores, tmp_path, monkeypatch, numba):
    """Resumed from its step-3 checkpoint, LeNet (row-column convolution, tiled max
    pooling) writes the step-6 checkpoint of the uninterrupted run byte for byte, with the
    compiled pooling kernels and with the numpy path."""
    import shutil

    from singa_core.api.job import Job

    if numba == "1":
        pytest.importorskip("numba")
    monkeypatch.setenv("SINGA_NUMBA", numba)
    conf = REPO / "examples" / "mnist" / "conv.conf"
    settings = {
        "neuralnet.layer[0].store_conf.path": str(mnist_stores / "train_data.bin"),
        "neuralnet.layer[1].store_conf.path": str(mnist_stores / "test_data.bin"),
        "train_steps": 6,
        "checkpoint_freq": 3,
        "test_steps": 0,
        "disp_freq": 0,
        "num_openblas_threads": 1,
    }

    def job(ws):
        return Job.from_file(
            conf, overrides=settings, seed=3, workspace=ws, quiet=True, tensorboard=False
        )

    job(tmp_path / "whole").train()
    shutil.copytree(tmp_path / "whole", tmp_path / "resumed")
    (tmp_path / "resumed" / "checkpoint" / "step6-worker0").unlink()
    job(tmp_path / "resumed").train(resume_from=3)
    name = "checkpoint/step6-worker0"
    assert (tmp_path / "resumed" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes()
