"""Param versions across checkpoints (§5.2 InitNetParams, §6, SINGA-107).

* initialised Params get version = the start step (0 for a new job);
* a Param loaded through ``checkpoint_path`` ALWAYS keeps the loaded values, whatever the
  saved version — 0.3 re-initialised those saved with version 0 (SINGA-107: a Param loaded
  but never updated by the previous job, like w1 in rbm2.conf) — and needs no ``init``;
* later files override earlier ones, also when the later one saved version 0;
* ``reset_param_version`` (default true) sets loaded versions to the start step, false
  keeps the saved ones; checkpoints save the version (number of updates since then);
* ``--resume`` restores the saved versions, and also works for Params without ``init``.
"""

from __future__ import annotations

import numpy as np
from conftest import mlp_conf, write_csv_blobs
from typer.testing import CliRunner

from singa_core.commands.cli import app
from singa_core.jobconf.parse import load_job
from singa_core.layer import kTest, kTrain
from singa_core.plugin_host.host import get_host
from singa_core.running import checkpoint as ck
from singa_core.running.job import prepare_job

runner = CliRunner()
HIDDEN, DIM = 16, 4
W1_INIT = 'param { name: "w1" init { type: kUniform low: -0.3 high: 0.3 } }'


def write_job(tmp_path, *, checkpoints=(), w1_init=True, name="job.conf", **kw):
    text = mlp_conf(write_csv_blobs(tmp_path / "blobs.csv"), tmp_path / name[:-5], **kw)
    assert W1_INIT in text
    if not w1_init:  # like rbm2.conf's Inner1: the values can only come from a checkpoint
        text = text.replace(W1_INIT, 'param { name: "w1" }')
    paths = "".join(f'checkpoint_path: "{c}"\n' for c in checkpoints)
    text = text.replace('name: "small"\n', f'name: "small"\n{paths}', 1)
    path = tmp_path / name
    path.write_text(text)
    return path


def write_ckpt(path, **records):
    """A SINGA BlobProtos file: name=(version, values) with 0.3's "0#" runtime names."""
    recs = [ck.ParamRecord(f"0#{n}", v, np.asarray(a, np.float32)) for n, (v, a) in records.items()]
    path.write_bytes(ck.encode_params(recs))
    return path


def marked(shape, offset):
    """Values no initialiser produces (so a re-initialisation cannot go unnoticed)."""
    return (np.arange(np.prod(shape), dtype=np.float32).reshape(shape) + offset) / 7.0


def prepare(path, *overrides):
    return prepare_job(load_job(path, list(overrides)), get_host(), seed=3)


def params(prepared, phase=kTrain):
    return {p.name: p for p in prepared.nets[phase].params}


def test_a_param_saved_with_version_0_keeps_its_loaded_values(tmp_path):
    w1, b1 = marked((HIDDEN, DIM), 1), marked((HIDDEN,), 100)
    src = write_ckpt(tmp_path / "src", w1=(0, w1), b1=(7, b1))
    got = params(prepare(write_job(tmp_path, checkpoints=[src])))
    np.testing.assert_array_equal(got["w1"].value, w1)  # 0.3 re-initialised it (SINGA-107)
    np.testing.assert_array_equal(got["b1"].value, b1)
    assert got["w1"].version == got["b1"].version == 0  # reset_param_version: start step
    # Params no file holds are initialised exactly as without checkpoints, version = step
    fresh = params(prepare(write_job(tmp_path, name="fresh.conf")))
    for name in ("w2", "b2"):
        np.testing.assert_array_equal(got[name].value, fresh[name].value)
        assert got[name].version == 0
    assert not np.array_equal(fresh["w1"].value, w1)


def test_reset_param_version_false_keeps_the_saved_versions(tmp_path):
    src = write_ckpt(tmp_path / "src", w1=(0, marked((HIDDEN, DIM), 2)), b1=(7, np.ones(HIDDEN)))
    got = params(prepare(write_job(tmp_path, checkpoints=[src]), "reset_param_version=false"))
    assert got["w1"].version == 0 and got["b1"].version == 7
    np.testing.assert_array_equal(got["w1"].value, marked((HIDDEN, DIM), 2))
    test_net = params(prepare(write_job(tmp_path, checkpoints=[src])), kTest)
    np.testing.assert_array_equal(test_net["w1"].value, marked((HIDDEN, DIM), 2))


def test_later_files_override_earlier_ones_even_with_version_0(tmp_path):
    trained = write_ckpt(tmp_path / "trained", w1=(50, marked((HIDDEN, DIM), 3)))
    carried = write_ckpt(tmp_path / "carried", w1=(0, marked((HIDDEN, DIM), 4)))
    # 0.3's rbm confs list the file that trained a param last because of SINGA-107;
    # the other order must load the version-0 values too, not re-initialise them
    for order, want in (([trained, carried], 4), ([carried, trained], 3)):
        got = params(prepare(write_job(tmp_path, checkpoints=order)))["w1"]
        np.testing.assert_array_equal(got.value, marked((HIDDEN, DIM), want))


def test_a_param_without_init_needs_a_checkpoint(tmp_path):
    src = write_ckpt(tmp_path / "src", w1=(0, marked((HIDDEN, DIM), 5)))
    got = params(prepare(write_job(tmp_path, checkpoints=[src], w1_init=False)))
    np.testing.assert_array_equal(got["w1"].value, marked((HIDDEN, DIM), 5))
    other = write_ckpt(tmp_path / "other", b1=(3, np.zeros(HIDDEN)))
    job = write_job(tmp_path, checkpoints=[other], w1_init=False, name="bad.conf")
    res = runner.invoke(app, ["train", str(job)])
    assert res.exit_code == 2, res.output
    assert "param 'w1' has no init method" in res.output
    assert f"in none of the checkpoints {other}" in res.output


def cli(*args):
    res = runner.invoke(app, [str(a) for a in args])
    assert res.exit_code == 0, f"{res.output}\n{res.exception!r}"
    return res


def saved(path):
    return {r.name: r for r in ck.read_params(path)}


def test_training_from_a_version_0_checkpoint_saves_loaded_values_and_counts_updates(tmp_path):
    w1 = marked((HIDDEN, DIM), 6)
    src = write_ckpt(tmp_path / "src", w1=(0, w1))
    job = write_job(tmp_path, checkpoints=[src], w1_init=False, steps=5, checkpoint_freq=5)
    cli("train", job, "--seed", "1", "-o", "test_steps=0")
    first, last = (saved(tmp_path / "job" / "checkpoint" / f"step{s}-worker0") for s in (0, 5))
    np.testing.assert_array_equal(first["0#w1"].value, w1)
    assert {r.version for r in first.values()} == {0}
    assert {r.version for r in last.values()} == {5}  # every param updated 5 times
    assert not np.array_equal(last["0#w1"].value, w1)


def test_resume_restores_saved_versions_for_params_without_init(tmp_path):
    src = write_ckpt(tmp_path / "src", w1=(0, marked((HIDDEN, DIM), 7)))
    job = write_job(tmp_path, checkpoints=[src], w1_init=False, steps=8, checkpoint_freq=3)
    cli("train", job, "--seed", "2", "-o", "test_steps=0")
    full = saved(tmp_path / "job" / "checkpoint" / "step8-worker0")
    ws = tmp_path / "resumed"
    cli("train", job, "--seed", "2", "-o", "test_steps=0", "-o", "train_steps=4", "--workspace", ws)
    # the step-3 checkpoint is the newest complete one: resume from it, not checkpoint_path
    (ws / "checkpoint" / "step4-worker0").unlink()
    (ws / "checkpoint" / "step4-worker0.state.npz").unlink()
    out = cli("train", job, "--resume", "-o", "test_steps=0", "--workspace", ws).output
    assert "resuming at step 3" in out
    resumed = saved(ws / "checkpoint" / "step8-worker0")
    for name, rec in full.items():
        np.testing.assert_array_equal(rec.value, resumed[name].value, err_msg=name)
        assert rec.version == resumed[name].version == 8
