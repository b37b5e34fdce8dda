"""The Python API (singa_core.api.job): Job.from_file, train, test, net, callbacks,
errors."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import numpy as np
import pytest
from conftest import REPO

from singa_core import Job
from singa_core.errors import Location, SingaError
from singa_core.names import runtime_param_name
from singa_core.running.checkpoint import read_params


def test_import_singa_core_stays_light():
    code = (
        "import sys, singa_core; print('singa_core.api.job' in sys.modules, 'numpy' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_train_returns_metrics_checkpoint_and_callbacks(small_job, capsys):
    conf, ws = small_job(steps=60, checkpoint_freq=20)
    job = Job.from_file(conf, overrides={"train_steps": 40}, seed=3)
    events = []
    job.on("display", events.append)
    job.on("checkpoint", events.append)

    @job.on("test")
    def seen(event):
        events.append(event)

    result = job.train()
    assert not result.interrupted and result.trained
    assert result.final_step == 40 and result.seed == 3
    assert result.checkpoint == str(ws / "checkpoint" / "step40-worker0")
    assert [(e.kind, e.step) for e in events] == [
        ("test", 0),
        ("checkpoint", 0),
        ("display", 0),
        ("display", 10),
        ("checkpoint", 20),
        ("display", 20),
        ("test", 30),
        ("display", 30),
        ("test", 40),  # the last step is evaluated too (a singa addition)
        ("checkpoint", 40),
    ]
    assert events[-1].checkpoint == result.checkpoint and events[-1].seconds >= 0
    assert set(result.metrics) == {"train", "test"}
    assert [s for s, _ in result.history["train"]] == [0, 10, 20, 30]
    assert result.history["test"][-1] == (40, result.metrics["test"])
    # the same numbers as metrics.jsonl
    logged = [json.loads(x) for x in (ws / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in logged if r.get("phase") == "train"]
    assert [r["loss"] for r in train] == [m["loss"] for _, m in result.history["train"]]
    # the wall time and its split
    t = result.times
    assert t.steps == 40 and t.training > 0 and t.evaluation > 0 and t.checkpoints > 0
    assert t.wall >= t.setup + t.training + t.evaluation + t.checkpoints - 1e-6
    assert re.match(
        r"finished at step 40 in [\d.]+ s: set-up [\d.]+ s, training [\d.]+ s \(40 steps, "
        r"[\d.]+ ms/step\), evaluation [\d.]+ s, checkpoints [\d.]+ s, other [\d.]+ s; "
        r"test loss = [\d.]+, accuracy = [\d.]+; checkpoint: .*step40-worker0$",
        result.summary(),
    )
    out = capsys.readouterr()
    assert "Train step-30, loss = " in out.out and "seed 3" in out.err


def test_net_holds_the_trained_params_as_numpy(small_job):
    conf, ws = small_job(steps=20)
    job = Job.from_file(conf, seed=1, quiet=True)
    before = job.net.params["w1"].copy()
    assert [layer.name for layer in job.net] == ["data", "ip1", "tanh", "ip2", "loss"]
    assert job.net["ip1"].type == "kInnerProduct" and job.net["ip1"].shape == (20, 16)
    assert set(job.net["ip1"].params) == {"w1", "b1"}
    result = job.train()
    saved = {r.name: r.value for r in read_params(result.checkpoint)}
    for name, value in job.net.params.items():
        assert isinstance(value, np.ndarray)
        np.testing.assert_array_equal(value, saved[runtime_param_name(name)].reshape(value.shape))
    assert not np.array_equal(before, job.net.params["w1"])
    with pytest.raises(SingaError, match="trained already"):
        job.train()


def test_test_evaluates_the_newest_checkpoint(small_job):
    conf, ws = small_job(steps=60)
    Job.from_file(conf, seed=2, quiet=True).train()
    res = Job.from_file(conf).test(steps=10)
    assert res.steps == 10 and res.checkpoints == [str(ws / "checkpoint" / "step60-worker0")]
    assert res.metrics["accuracy"] > 0.9  # Gaussian blobs are easy
    assert res.summary().startswith("Test (10 batches, ")


def test_interruption_is_a_result_not_an_exit(small_job):
    conf, ws = small_job(steps=1000)
    job = Job.from_file(conf, seed=0, quiet=True)
    job.on("display", lambda ev: ev.step == 20 and os.kill(os.getpid(), signal.SIGINT))
    result = job.train()  # no SystemExit, no KeyboardInterrupt
    assert result.interrupted and result.stop_signal == signal.SIGINT
    assert result.final_step == 21
    assert (ws / "checkpoint" / "step21-worker0").exists()
    assert result.summary().startswith("interrupted at step 21 after ")
    assert "continue with --resume" in result.summary()
    resumed_job = Job.from_file(conf, quiet=True, tensorboard=False)
    again = resumed_job.train(resume=True)
    assert again.final_step == 1000 and not again.interrupted
    # job.net shows the resumed run's trained Params, not a fresh initialisation
    saved = {r.name: r.value for r in read_params(again.checkpoint)}
    for name, value in resumed_job.net.params.items():
        np.testing.assert_array_equal(value, saved[runtime_param_name(name)].reshape(value.shape))


def test_errors_are_located_singa_errors(small_job, tmp_path):
    conf, _ = small_job()
    bad = tmp_path / "bad.conf"
    bad.write_text(conf.read_text().replace("disp_freq: 10", "disp_frequency: 10"))
    with pytest.raises(SingaError) as info:
        Job.from_file(bad)
    assert isinstance(info.value.where, Location) and info.value.where.line == 4
    assert "disp_freq" in info.value.help
    with pytest.raises(SingaError) as info:
        Job.from_file(conf, overrides={"train_stepz": 5})
    assert "-o train_stepz=5" in str(info.value.where)
    with pytest.raises(SingaError, match="no event"):
        Job.from_file(conf).on("epoch", print)


def _guide_api_example() -> str:
    text = (REPO / "docs" / "guide" / "python-api.md").read_text()
    return text.split("```python\n", 1)[1].split("```", 1)[0]


@pytest.mark.slow
def test_the_guides_python_example_runs_on_mnist(mnist_stores, tmp_path, monkeypatch):
    """docs/guide/python-api.md's example, verbatim, from a folder laid out as after the
    README's first command (examples/mnist with the stores beside job.conf)."""
    folder = tmp_path / "examples" / "mnist"
    folder.mkdir(parents=True)
    (folder / "job.conf").write_text((REPO / "examples" / "mnist" / "job.conf").read_text())
    for name in ("train_data.bin", "test_data.bin"):
        (folder / name).symlink_to(mnist_stores / name)
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(_guide_api_example(), "python-api.md", "exec"), scope)
    result, job = scope["result"], scope["job"]
    assert result.final_step == 300 and not result.interrupted
    assert (folder / "checkpoint" / "step300-worker0").exists()
    assert scope["accuracy"] > 0.8  # all 10,000 test images after 300 steps
    assert job.net.params["w1"].shape == (2500, 784)
    assert scope["model"].predict(scope["pixels"]).shape == (5, 10)
