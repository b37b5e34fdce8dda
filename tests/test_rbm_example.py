"""End to end: SINGA 0.3's RBM pre-training + deep auto-encoder pipeline (examples/rbm/,
§8.5) through the CLI on real MNIST, every stage shortened: rbm1 -> rbm2 -> rbm3 -> rbm4 ->
autoencoder, each loading the previous stages' final checkpoints through the
checkpoint_path chains written in the confs (in 0.3's order), with workspaces in tmp_path.
Also `singa test` (SINGA's -test) of a CD job's checkpoint."""

from __future__ import annotations

import gzip
import json
import re

import numpy as np
import pytest
from conftest import REPO, mnist_example_args
from typer.testing import CliRunner

from singa_core.commands.cli import app
from singa_core.jobconf.parse import load_job
from singa_core.running import checkpoint as ck

runner = CliRunner()
EXAMPLE = REPO / "examples" / "rbm"
STEPS = {"rbm1": 100, "rbm2": 60, "rbm3": 60, "rbm4": 60, "autoencoder": 100}
# checkpoint_path as 0.3 shipped it (§8.5): the file where a param was trained comes last
CHAIN = {
    "rbm1": [],
    "rbm2": ["rbm1"],
    "rbm3": ["rbm2", "rbm1"],
    "rbm4": ["rbm3", "rbm2", "rbm1"],
    "autoencoder": ["rbm4", "rbm3", "rbm2", "rbm1"],
}
# param -> the stage that trained it (RBM k: wk, bk1 visible bias, bk2 hidden bias)
TRAINED_BY = {f"{p}{k}": f"rbm{k}" for k in range(1, 5) for p in ("w", "b")}
TEST_STEPS = 5


def cli(*args) -> str:
    res = runner.invoke(app, [str(a) for a in args])
    assert res.exit_code == 0, f"{res.output}\n{res.exception!r}"
    return res.output


def final_ckpt(ws, stage):
    return ws / stage / "checkpoint" / f"step{STEPS[stage]}-worker0"


def params(path) -> dict[str, ck.ParamRecord]:
    return {r.name.removeprefix("0#"): r for r in ck.read_params(path)}


def evaluations(ws, stage) -> list[dict]:
    lines = [json.loads(x) for x in (ws / stage / "metrics.jsonl").read_text().splitlines()]
    return [x for x in lines if x.get("phase") == "test"]


def train_stage(stage, ws, data_args) -> str:
    conf = EXAMPLE / f"{stage}.conf"
    shipped = list(load_job(conf).job.checkpoint_path)
    assert shipped == [f"examples/rbm/{s}/checkpoint/step6000-worker0" for s in CHAIN[stage]]
    chain = []
    for i, src in enumerate(CHAIN[stage]):
        chain += ["-o", f"checkpoint_path[{i}]={final_ckpt(ws, src)}"]
    n = STEPS[stage]
    short = [f"train_steps={n}", f"test_steps={TEST_STEPS}", f"test_freq={n // 4}"]
    short += [f"checkpoint_freq={n}", "disp_freq=50"]
    return cli(
        "train", conf, "--seed", "0", "--workspace", ws / stage, *data_args, *chain,
        *[a for o in short for a in ("-o", o)],
    )  # fmt: skip


def mean_image_loss(data_dir) -> float:
    """Σ over pixels of the per-pixel variance of the 10,000 test images (x/255): the
    squared error per image of always predicting the mean image."""
    with gzip.open(data_dir / "mnist" / "t10k-images-idx3-ubyte.gz") as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784) / 255.0
    return float(x.var(axis=0).sum())


def check_loaded(ws, stage, names):
    """The stage's step-0 checkpoint holds exactly the values its sources trained."""
    first = params(ws / stage / "checkpoint" / "step0-worker0")
    for name in names:
        src = TRAINED_BY[name[:2]]
        want = params(final_ckpt(ws, src))[name]
        np.testing.assert_array_equal(first[name].value, want.value, err_msg=f"{stage} {name}")
        assert first[name].version == 0  # reset_param_version: restart at the job's step


@pytest.mark.slow
def test_rbm_pretraining_then_autoencoder(mnist_stores, data_dir, tmp_path):
    ws = tmp_path / "rbm"
    # one BLAS thread: on a busy 2-core machine two spinning OpenBLAS threads run ~10x slower
    data = [*mnist_example_args(mnist_stores), "-o", "num_openblas_threads=1"]

    # rbm1: 784 -> 1000 from scratch
    out = train_stage("rbm1", ws, data)
    assert "Test step-0, Squared Error = " in out
    t1 = evaluations(ws, "rbm1")
    assert len(t1) == 5 and t1[0]["step"] == 0  # every test_freq steps and at the end
    assert t1[-1]["Squared Error"] < 0.25 * t1[0]["Squared Error"], t1

    # SINGA's -test on the CD job: the step-0 checkpoint gives the training run's
    # Test step-0 number exactly (same seed, same batches), the final one a far lower one
    step0 = ws / "rbm1" / "checkpoint" / "step0-worker0"
    conf1 = EXAMPLE / "rbm1.conf"
    args = ["--steps", TEST_STEPS, *data, "-o", "seed=0"]
    out = cli("test", conf1, *args, "--checkpoint", step0)
    err0 = float(re.search(r"Squared Error = (\S+)", out).group(1))
    assert err0 == pytest.approx(t1[0]["Squared Error"], rel=1e-9, abs=1e-6), out
    out = cli("test", conf1, *args, "-o", f"cluster.workspace={ws / 'rbm1'}")
    assert str(final_ckpt(ws, "rbm1")) in out  # the newest checkpoint of the workspace
    assert float(re.search(r"Squared Error = (\S+)", out).group(1)) < 0.25 * err0

    # rbm2: Inner1 (w1, b12 from rbm1; no init in the conf) -> RBM 1000 -> 500
    train_stage("rbm2", ws, data)
    check_loaded(ws, "rbm2", ["w1", "b12"])
    last2 = params(final_ckpt(ws, "rbm2"))
    # w1 is used but never updated by rbm2: saved unchanged with version 0 (SINGA-107's
    # case; 0.3 re-initialised such a param when loading it)
    np.testing.assert_array_equal(last2["w1"].value, params(final_ckpt(ws, "rbm1"))["w1"].value)
    assert last2["w1"].version == 0 and last2["w2"].version == STEPS["rbm2"]
    t2 = evaluations(ws, "rbm2")
    assert t2[-1]["Squared Error"] < 0.25 * t2[0]["Squared Error"], t2
    # `singa test` of a fine-tuning job evaluates its own newest checkpoint, not the
    # checkpoint_path it started from
    out = cli("test", EXAMPLE / "rbm2.conf", *args, "-o", f"cluster.workspace={ws / 'rbm2'}")
    assert str(final_ckpt(ws, "rbm2")) in out and "rbm1" not in out
    assert float(re.search(r"Squared Error = (\S+)", out).group(1)) < 0.25 * t2[0]["Squared Error"]

    # rbm3, rbm4: each loads every lower layer from the stage that trained it
    train_stage("rbm3", ws, data)
    check_loaded(ws, "rbm3", ["w1", "b12", "w2", "b22"])
    t3 = evaluations(ws, "rbm3")
    assert t3[-1]["Squared Error"] < 0.5 * t3[0]["Squared Error"], t3
    train_stage("rbm4", ws, data)
    check_loaded(ws, "rbm4", ["w1", "b12", "w2", "b22", "w3", "b32"])
    t4 = evaluations(ws, "rbm4")  # gaussian hidden units, lr 0.001: slower
    assert t4[-1]["Squared Error"] < 0.9 * t4[0]["Squared Error"], t4

    # the auto-encoder: every weight and both biases of every RBM, decoder transposed
    train_stage("autoencoder", ws, data)
    biases = [f"b{k}{j}" for k in range(1, 5) for j in (1, 2)]
    check_loaded(ws, "autoencoder", ["w1", "w2", "w3", "w4", *biases])
    ta = evaluations(ws, "autoencoder")
    assert ta[-1]["loss"] < 0.7 * ta[0]["loss"], ta
    # on all 10,000 test images it beats predicting the mean image by far
    out = cli("test", EXAMPLE / "autoencoder.conf", "--steps", 100, *data,
              "--checkpoint", final_ckpt(ws, "autoencoder"))  # fmt: skip
    loss = float(re.search(r"loss = (\S+)", out).group(1).rstrip(","))
    baseline = mean_image_loss(data_dir)
    assert loss < 0.6 * baseline, (loss, baseline)


def test_time_and_test_of_a_cd_job_choose_threads_on_what_they_run(mnist_stores, monkeypatch):
    """A CD net computes nothing in a plain forward pass: `singa time` chooses its BLAS
    threads by timing its own training steps and `singa test` by timing the worker's test
    passes (both once timed 0.0 ms at each count and kept 1 thread by default)."""
    from singa_core.layer import kTest
    from singa_core.plugin_host.host import get_host
    from singa_core.resources import usable_cpus
    from singa_core.running.job import prepare_job
    from singa_core.running.thread_trial import choose_for_net

    if usable_cpus() < 2:
        pytest.skip("one usable CPU: no thread count to choose")
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    conf = EXAMPLE / "rbm1.conf"
    data = mnist_example_args(mnist_stores)
    medians = r"median step ([0-9.]+) ms at 1 thread, ([0-9.]+) ms at"
    out = cli("time", conf, "--iterations", 1, "--warmup", 0, *data)
    assert min(float(v) for v in re.search(medians, out).groups()) > 0.5, out

    prepared = prepare_job(load_job(conf, data[1::2]), get_host(), test_only=True, seed=0)
    n, why = choose_for_net(prepared.nets[kTest], kTest, worker=prepared.make_worker())
    assert min(float(v) for v in re.search(medians, why).groups()) > 0.5, why
