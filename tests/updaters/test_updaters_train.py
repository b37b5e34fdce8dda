"""End-to-end: the small CSV MLP job trains with every built-in adaptive updater.

Runs the real CLI in-process (typer's CliRunner), as tests/core/test_training.py does, with
the ``updater { ... }`` block of ``conftest.mlp_conf`` replaced.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from conftest import mlp_conf, write_csv_blobs
from typer.testing import CliRunner

from singa_core.commands.cli import app
from singa_core.running import checkpoint as ck

runner = CliRunner()

UPDATERS = {
    "kNesterov": """
  type: kNesterov
  momentum: 0.9
  weight_decay: 0.0001
  clip_low: -5 clip_high: 5
  learning_rate { type: kStep base_lr: 0.05 step_conf { change_freq: 20 gamma: 0.9 } }""",
    "kAdaGrad": """
  type: kAdaGrad
  weight_decay: 0.0001
  clip_low: -5 clip_high: 5
  learning_rate { type: kStep base_lr: 0.1 step_conf { change_freq: 20 gamma: 0.9 } }""",
    "kRMSProp": """
  type: kRMSProp
  rmsprop_conf { rho: 0.9 }
  weight_decay: 0.0001
  clip_low: -5 clip_high: 5
  learning_rate { type: kStep base_lr: 0.01 step_conf { change_freq: 20 gamma: 0.9 } }""",
    "kAdaDelta": """
  type: kAdaDelta
  adadelta_conf { rho: 0.9 }
  delta: 1e-6
  weight_decay: 0.0001
  learning_rate { type: kFixed base_lr: 1.0 }""",
    "kAdam": """
  type: kAdam
  adam_conf { beta1: 0.9 beta2: 0.999 }
  weight_decay: 0.0001
  learning_rate { type: kStep base_lr: 0.01 step_conf { change_freq: 20 gamma: 0.9 } }""",
    "kAdamMax": """
  type: kAdamMax
  weight_decay: 0.0001
  learning_rate { type: kStep base_lr: 0.01 step_conf { change_freq: 20 gamma: 0.9 } }""",
}


def singa(*args):
    res = runner.invoke(app, [str(a) for a in args])
    if res.exit_code != 0:
        raise AssertionError(f"exit {res.exit_code}\n{res.output}\n{res.exception!r}")
    return res


def job_with_updater(tmp_path, updater_body: str, **kw):
    """(job.conf, workspace) of the small MLP with its updater block replaced."""
    data = write_csv_blobs(tmp_path / "blobs.csv")
    ws = tmp_path / "ws"
    text, n = re.subn(
        r"^updater \{\n.*?^\}\n",
        lambda _: f"updater {{{updater_body}\n}}\n",
        mlp_conf(data, ws, **kw),
        flags=re.S | re.M,
    )
    assert n == 1
    conf = tmp_path / "job.conf"
    conf.write_text(text)
    return conf, ws


def train_losses(ws):
    lines = [json.loads(x) for x in (ws / "metrics.jsonl").read_text().splitlines()]
    return [x["loss"] for x in lines if x.get("phase") == "train"]


def params_of(path):
    return {r.name: r for r in ck.read_params(path)}


@pytest.mark.parametrize("name", list(UPDATERS))
def test_small_job_trains(name, tmp_path):
    conf, ws = job_with_updater(tmp_path, UPDATERS[name], steps=60)
    out = singa("train", conf, "--seed", "3").output
    assert "Train step-50, " in out
    losses = train_losses(ws)
    assert len(losses) >= 5 and all(np.isfinite(losses))
    assert losses[-1] < 0.5 * losses[0], losses


def test_adam_resume_gives_the_uninterrupted_parameters(tmp_path):
    """Adam's m and v must be checkpointed with the parameters for an exact resume."""
    conf, ws = job_with_updater(tmp_path, UPDATERS["kAdam"], steps=60, checkpoint_freq=25)
    singa("train", conf, "--seed", "9")
    full = params_of(ws / "checkpoint" / "step60-worker0")

    ws2 = tmp_path / "resumed"
    singa("train", conf, "--seed", "9", "--workspace", ws2, "-o", "train_steps=37")
    out = singa("train", conf, "--resume", "--workspace", ws2).output
    assert "resuming at step 37 |" in out
    resumed = params_of(ws2 / "checkpoint" / "step60-worker0")
    for name, rec in full.items():
        np.testing.assert_array_equal(rec.value, resumed[name].value, err_msg=name)
        assert rec.version == resumed[name].version


def test_rmsprop_without_rho_is_a_located_user_error(tmp_path):
    body = UPDATERS["kRMSProp"].replace("rmsprop_conf { rho: 0.9 }", "")
    conf, _ = job_with_updater(tmp_path, body, steps=5)
    res = runner.invoke(app, ["train", str(conf)])
    assert res.exit_code == 2, res.output
    assert "kRMSProp needs updater.rmsprop_conf.rho" in res.output
    assert "job.conf:" in res.output and "rmsprop_conf { rho: 0.9 }" in res.output
