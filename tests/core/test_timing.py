"""`singa time`: the per-layer table of the MNIST MLP and LeNet on real batches, its sum
against a measured training step of the in-process engine, FLOPs of the layers that know
them, and that nothing is written."""

from __future__ import annotations

import json

import pytest
from conftest import REPO, mnist_example_args
from typer.testing import CliRunner

from singa_core.commands.cli import app
from singa_core.commands.timing import time_training_step
from singa_core.jobconf.parse import load_job
from singa_core.plugin_host.host import get_host
from singa_core.running.job import prepare_job
from singa_core.running.reporting import Reporter

runner = CliRunner()
MLP = REPO / "examples" / "mnist" / "job.conf"
LENET = REPO / "examples" / "mnist" / "conv.conf"


def overrides(stores, ws) -> list[str]:
    args = mnist_example_args(stores)
    return [*args[1::2], f"cluster.workspace={ws}", "num_openblas_threads=1"]


def test_mlp_table_and_nothing_written(mnist_stores, tmp_path):
    ws = tmp_path / "ws"
    args = [f"-o{o}" for o in overrides(mnist_stores, ws)]
    res = runner.invoke(app, ["time", str(MLP), *args, "-n", "3", "--warmup", "1", "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert not ws.exists()  # no checkpoint, no metrics, no workspace
    names = [r["layer"] for r in d["layers"]]
    assert names == [
        "data", "fc1", "tanh1", "fc2", "tanh2", "fc3", "tanh3", "fc4", "tanh4", "fc5", "tanh5",
        "fc6", "loss",
    ]  # fmt: skip
    rows = {r["layer"]: r for r in d["layers"]}
    assert rows["fc2"]["type"] == "kInnerProduct" and rows["fc2"]["shape"] == [64, 2000]
    # FLOPs: a GEMM (B x V)·(V x H) is 2·B·V·H, plus the bias; fc1's source (the data layer)
    # takes no gradient, fc2's does
    b = 64
    assert rows["fc1"]["flops"] == [2 * b * 784 * 2500 + b * 2500] * 2
    fc2 = 2 * b * 2500 * 2000
    assert rows["fc2"]["flops"] == [fc2 + b * 2000, 2 * fc2 + b * 2000]
    assert rows["fc2"]["gflop_per_s"] > 0 and rows["tanh1"]["gflop_per_s"] is None
    parts = d["forward_ms"] + d["backward_ms"] + d["updater_ms"] + d["engine_ms"]
    assert parts == pytest.approx(d["step_ms"], rel=1e-9)
    assert sum(r["share"] for r in d["layers"]) + d["updater_share"] + d[
        "engine_share"
    ] == pytest.approx(1.0)
    # the inner products do most of the work
    ip = sum(r["share"] for r in d["layers"] if r["type"] == "kInnerProduct")
    assert ip > 0.5 and d["updater_ms"] > 0


def test_lenet_table(mnist_stores, tmp_path):
    args = [f"-o{o}" for o in overrides(mnist_stores, tmp_path / "ws")]
    res = runner.invoke(app, ["time", str(LENET), *args, "-n", "2", "--warmup", "1"])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0].split() == [
        "layer", "type", "output", "forward", "ms", "backward", "ms", "share", "GFLOP/s",
    ]  # fmt: skip
    conv1 = next(line for line in lines if line.startswith("conv1 "))
    assert "kCConvolution" in conv1 and "64x20x24x24" in conv1
    assert float(conv1.split()[-1]) > 0  # GFLOP/s
    pool1 = next(line for line in lines if line.startswith("pool1 "))
    assert "kCPooling" in pool1 and "64x20x12x12" in pool1
    assert any(line.startswith("updater ") for line in lines)
    assert any(line.startswith("engine ") for line in lines)
    assert lines[-1].startswith("step: ")

    d = json.loads(
        runner.invoke(app, ["time", str(LENET), *args, "-n", "1", "--warmup", "0", "--json"]).output
    )
    conv = {r["layer"]: r for r in d["layers"]}["conv1"]
    # 20 filters of 1x5x5 over 24x24 positions of 64 images; the data layer takes no gradient
    cols = 24 * 24 * 64
    assert conv["flops"] == [2 * 20 * 25 * cols + 20 * cols] * 2


@pytest.mark.slow
def test_table_sum_matches_a_measured_training_step(mnist_stores, tmp_path):
    """The table's total (layers + updater + engine, which add up to each timed step)
    against the step time the in-process engine's training loop measures for the same job,
    alternating to share the machine's drift. Each side's fastest step is compared (noise
    from other processes only adds time), with a generous tolerance for shared 2-core
    machines; no absolute timing is asserted."""
    host = get_host()

    def prepared(ws):
        cfg = load_job(MLP, [*overrides(mnist_stores, ws), "test_steps=0", "disp_freq=0"])
        return prepare_job(cfg, host, seed=0)

    from singa_core.blas import set_blas_threads

    set_blas_threads(1)
    tables, trained = [], []
    for r in range(3):
        t = time_training_step(prepared(tmp_path / "t"), iterations=5, warmup=1)
        d = t.as_dict()
        assert d["sum_ms"] == pytest.approx(d["step_ms"], rel=1e-9)
        tables.append(1000 * min(t.step))
        p = prepared(tmp_path / f"w{r}")
        p.job.train_steps = 7
        p.job.checkpoint_freq = 0
        reporter = Reporter(quiet=True, live=False)
        engine = host.get("engine", "inprocess")(p, reporter)
        engine.train()
        trained.append(1000 * min(reporter._step_times[1:]))
    table_ms, train_ms = min(tables), min(trained)
    assert table_ms == pytest.approx(train_ms, rel=0.25), (tables, trained)


def test_rbm_layers_count_their_products(mnist_stores, tmp_path):
    """RBM1 (784-1000, batch 100): kRBMHid's forward is both phases' ``v·Wᵀ``, kRBMVis's
    the reconstruction's ``h·W`` and its backward the stacked weight gradient (dense
    counts: 10·B·V·H a step, PyTorch's count of the same step)."""
    rbm1 = REPO / "examples" / "rbm" / "rbm1.conf"
    args = [f"-o{o}" for o in overrides(mnist_stores, tmp_path / "ws")]
    res = runner.invoke(app, ["time", str(rbm1), *args, "-n", "1", "--warmup", "0", "--json"])
    assert res.exit_code == 0, res.output
    rows = {r["layer"]: r for r in json.loads(res.output)["layers"]}
    b, v, h = 100, 784, 1000
    product = 2 * b * v * h
    assert rows["RBMHid"]["flops"] == [2 * product, 2 * b * h]
    assert rows["RBMVis"]["flops"] == [product, 2 * product + 2 * b * v]
    total = sum(sum(rows[n]["flops"]) for n in ("RBMHid", "RBMVis"))
    assert total == pytest.approx(5 * product, rel=0.01)
