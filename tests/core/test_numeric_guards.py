"""Numeric guards: non-finite settings are located errors; a NaN/inf during training stops
the job at that step with exit 3, the newest good checkpoint intact and resumable;
metrics.jsonl stays strict JSON."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest
from typer.testing import CliRunner

from singa_core.commands.cli import app
from singa_core.running import checkpoint as ck
from singa_core.running.numeric import (
    NON_FINITE_EXIT,
    NonFiniteError,
    NumericGuard,
    all_finite,
    check_checkpoint_values,
)
from singa_core.running.reporting import Reporter, json_record

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def strict_json_lines(path):
    def refuse(c):
        raise AssertionError(f"non-JSON constant {c} in {path}")

    return [json.loads(x, parse_constant=refuse) for x in path.read_text().splitlines()]


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
@pytest.mark.parametrize(
    "field", ["updater.learning_rate.base_lr", "updater.momentum", "updater.weight_decay"]
)
def test_non_finite_setting_from_the_command_line_is_a_located_error(small_job, field, value):
    conf, ws = small_job(steps=5)
    res = invoke("train", conf, "-o", f"{field}={value}")
    assert res.exit_code == 2, res.output
    assert f"command line: -o {field}={value}: error: {field} is {float(value)}" in res.output
    assert "help:" in res.output and "Train step-0" not in res.output
    assert not (ws / "checkpoint").exists()


def test_non_finite_setting_in_the_file_points_at_its_line(small_job):
    conf, _ = small_job(steps=5)
    text = conf.read_text().replace("momentum: 0.9", "momentum: inf")
    conf.write_text(text)
    line = next(i for i, x in enumerate(text.splitlines(), 1) if "momentum: inf" in x)
    res = invoke("train", conf, "--dry-run")
    assert res.exit_code == 2
    assert f"{conf}:{line}:3: error: updater.momentum is inf" in res.output


def test_exploding_training_stops_at_the_first_non_finite_step(small_job, tmp_path):
    conf, ws = small_job(steps=60, checkpoint_freq=5)
    res = invoke("train", conf, "--seed", "1", "-o", "updater.learning_rate.base_lr=1e10")
    assert res.exit_code == NON_FINITE_EXIT == 3, res.output
    assert "Traceback" not in res.output
    out = res.output
    step = int(out.split("training went non-finite at step ")[1].split(":")[0])
    # w1 overflowed in the update of the step before: the step's first non-finite input
    assert "first Param 'w1' of layer 'ip1'" in out and "also the output of layer 'ip1'" in out
    step_ckpt = ws / "checkpoint" / f"step{step - step % 5}-worker0"
    assert f"the newest good checkpoint is {step_ckpt}" in out
    # nothing after the bad step was written, and what is there is intact and finite
    steps = ck.checkpoint_steps(ws)
    assert max(steps) == step - step % 5 <= step
    for files in steps.values():
        ck.verify_checkpoint(files)
        assert all(all_finite(r.value) for r in ck.read_params(files[0]))
    # the run is resumable from it (with a sane learning rate)
    res = invoke("train", conf, "--resume", "-o", "updater.learning_rate.base_lr=0.05", "-q")
    assert res.exit_code == 0, res.output
    assert f"resuming at step {step - step % 5}" in res.output
    assert all(all_finite(r.value) for r in ck.read_params(ws / "checkpoint" / "step60-worker0"))
    records = strict_json_lines(ws / "metrics.jsonl")
    event = next(r for r in records if r.get("event") == "non_finite")
    assert event["step"] == step and event["checkpoint"].startswith(str(step_ckpt))


def test_a_nan_init_stops_before_step_0(small_job):
    conf, ws = small_job(steps=60, checkpoint_freq=5)
    conf.write_text(conf.read_text().replace("kGaussian std: 0.1", "kGaussian std: nan"))
    res = invoke("train", conf, "--seed", "1")
    assert res.exit_code == 3, res.output
    assert "Param 'w2' of layer 'ip2' is non-finite before step 0 (48 NaN of 48 values)" in (
        res.output
    )
    assert "no good checkpoint was written" in res.output
    assert not ck.checkpoint_steps(ws)
    event = strict_json_lines(ws / "metrics.jsonl")[-1]
    assert event["event"] == "non_finite" and event["step"] == 0 and event["checkpoint"] is None


def test_a_nan_display_step_is_shown_and_logged_as_null(small_job):
    conf, ws = small_job(steps=60)
    # NaN data: the first training step goes non-finite, and it is a display step
    data = next(ws.parent.glob("blobs.csv"))
    rows = data.read_text().splitlines()
    rows[3] = ",".join(rows[3].split(",")[:-1] + ["nan"])
    data.write_text("\n".join(rows) + "\n")
    res = invoke("train", conf, "--seed", "1", "-o", "test_freq=0", "-o", "disp_freq=1")
    assert res.exit_code == 3, res.output
    step = int(res.output.split("training went non-finite at step ")[1].split(":")[0])
    assert f"Train step-{step}, loss = nan" in res.output
    assert f"at step {step}: first the output of layer 'data'" in res.output
    records = strict_json_lines(ws / "metrics.jsonl")
    train = [r for r in records if r.get("phase") == "train"]
    assert train[-1]["step"] == step and train[-1]["loss"] is None
    assert train[-1]["non_finite"]["loss"] == "nan"
    assert all(r["loss"] is not None for r in train[:-1])


def test_the_shm_engine_stops_with_exit_3_too(small_job):
    conf, ws = small_job(steps=40, checkpoint_freq=5)
    res = invoke(
        "train", conf, "--engine", "shm", "--seed", "1", "-o",
        "updater.learning_rate.base_lr=1e10",
    )  # fmt: skip
    assert res.exit_code == 3, res.output
    assert "training went non-finite at step" in res.output and "Traceback" not in res.output
    newest = max(ck.checkpoint_steps(ws))
    assert f"step{newest}-worker0 (step {newest}); it is intact" in res.output
    files = ck.checkpoint_steps(ws)[newest]
    ck.verify_checkpoint(files)
    assert all(all_finite(r.value) for r in ck.read_params(files[0]))


def test_json_records_are_strict():
    line = json_record({"phase": "train", "step": 3, "loss": math.nan, "acc": 0.5, "x": -math.inf})
    rec = json.loads(line, parse_constant=lambda c: pytest.fail(c))
    assert rec["loss"] is None and rec["x"] is None and rec["acc"] == 0.5
    assert rec["non_finite"] == {"loss": "nan", "x": "-inf"}


def test_reporter_writes_strict_json(tmp_path):
    rep = Reporter(metrics_path=tmp_path / "m.jsonl", live=False, quiet=True)
    rep.start(0, 10)
    rep.metrics("Train", 0, {"loss": float("inf")})
    rep.finish()
    rep.event("non_finite", step=0, error="x")
    recs = strict_json_lines(tmp_path / "m.jsonl")
    assert recs[1]["loss"] is None and recs[2]["event"] == "non_finite"


def test_all_finite_handles_overflowing_sums_and_nan():
    big = np.full(1000, 3e38, np.float32)  # finite, but its float32 sum overflows
    assert all_finite(big)
    for bad in (np.nan, np.inf, -np.inf):
        a = np.ones(1000, np.float32)
        a[517] = bad
        assert not all_finite(a)
    assert all_finite(np.zeros(0, np.float32))


def test_guard_names_the_first_layer_in_net_order(small_job):
    from singa_core.jobconf.parse import load_job
    from singa_core.layer import kTrain
    from singa_core.plugin_host.host import get_host
    from singa_core.running.job import prepare_job

    conf, _ = small_job(steps=5)
    prepared = prepare_job(load_job(conf), get_host())
    net = prepared.nets[kTrain]
    guard = NumericGuard(net)
    guard.check(0)  # freshly initialised: fine
    tanh = next(layer for layer in net.layers if layer.name == "tanh")
    tanh.grad[3, 1] = np.inf  # the gradient flowing back into ip1
    with pytest.raises(
        NonFiniteError, match="at step 7: first the output gradient of layer 'tanh'"
    ):
        guard.check(7)
    tanh.grad[3, 1] = 0
    p2 = next(p for layer in net.layers for p in layer.params if p.name.endswith("w2"))
    p2.value[0, 0] = np.nan  # a Param alone: found by the checkpoint writer
    guard.check(8)
    with pytest.raises(NonFiniteError, match="Param '.*w2' is non-finite at step 8"):
        check_checkpoint_values([ck.ParamRecord("0#w2", 8, p2.value)], 8)


def test_on_a_device_the_guard_checks_the_arrays_there_and_names_the_same_step(small_job):
    """The device's outputs and gradients are checked on the device every step (a flag
    read at displays and checkpoints, none in between): the run stops at the same step as
    on the CPU, and no checkpoint after it is written."""
    found = {}
    for device in ("cpu", "standin"):
        conf, ws = small_job(steps=60, checkpoint_freq=5)
        res = invoke(
            "train", conf, "--seed", "1", "--device", device,
            "-o", "updater.learning_rate.base_lr=1e10", "-o", "disp_freq=20",
        )  # fmt: skip
        assert res.exit_code == NON_FINITE_EXIT, res.output
        step = int(res.output.split("training went non-finite at step ")[1].split(":")[0])
        found[device] = (step, sorted(ck.checkpoint_steps(ws)))
        shutil.rmtree(ws)
    assert found["standin"] == found["cpu"]
    step, steps = found["cpu"]
    assert max(steps) == step - step % 5
