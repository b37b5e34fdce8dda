"""One rule for which checkpoint (issue 46, point 4): ``singa train --resume``, ``predict``,
``test`` and ``export`` pick a workspace's checkpoint with the same function
(``running.checkpoint.choose_checkpoint``): the newest verifiable step wins over a newer one
without a manifest (with a warning saying so); an untrained step-0 checkpoint is never the
default while a trained one exists, here or moved aside, without an error saying so in its
first line; the numeric guard never calls an unverifiable checkpoint intact."""

from __future__ import annotations

import re
import shutil

import numpy as np
import pytest
from conftest import invoke_singa as invoke

from singa_core.errors import SingaWarning
from singa_core.running import checkpoint as ck
from singa_core.testing import blobs_csv, mlp_job, run_job


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("rule")
    data = blobs_csv(folder / "blobs.csv", n=100)
    conf = mlp_job(data, steps=40).replace("disp_freq: 10", "disp_freq: 10\ncheckpoint_freq: 20")
    run_job(conf, folder)
    np.save(folder / "x.npy", np.zeros((2, 4), np.float32))
    return folder


@pytest.fixture
def job(trained, tmp_path):
    folder = tmp_path / "job"
    shutil.copytree(trained, folder)
    return folder / "job.conf", folder / "workspace", folder / "x.npy"


def _uses(conf, ws, x, out):
    """The commands that use a workspace's checkpoint by default, as argument lists."""
    return {
        "predict": ["predict", conf, x, "--workspace", ws],
        "test": ["test", conf, "-o", f"cluster.workspace={ws}", "--steps", "1"],
        "export": ["export", conf, "--workspace", ws, "--out", out / "m.safetensors"],
    }


def _step_used(output: str) -> int:
    m = re.search(r"^checkpoint: \S+ \(step (\d+)", output, re.M)
    assert m, output
    return int(m.group(1))


def test_a_newer_unverifiable_checkpoint_loses_to_the_verified_one_everywhere(job, tmp_path):
    conf, ws, x = job
    ck.manifest_path(ws / "checkpoint" / "step40-worker0").unlink()  # step 40: unverifiable
    said = r"the checkpoint\(s\) of step 40 in .* cannot be verified; using step 20, the newest"
    for name, args in _uses(conf, ws, x, tmp_path).items():
        with pytest.warns(SingaWarning, match=said):
            res = invoke(*args)
        assert res.exit_code == 0, (name, res.output)
        assert _step_used(res.output) == 20, (name, res.output)
    with pytest.warns(SingaWarning, match="continuing from step 20, the newest verifiable one"):
        res = invoke("train", conf, "--workspace", ws, "--resume", "-o", "train_steps=30", "-q")
    assert res.exit_code == 0, res.output
    assert "resuming at step 20" in res.output


def _killed_second_run(conf, ws):
    """A second run of the job that moved the first run's checkpoints aside and was killed
    after its step-0 checkpoint: only step 0 is left in WS/checkpoint."""
    res = invoke("train", conf, "--workspace", ws, "-o", "train_steps=10", "-q")
    assert res.exit_code == 0, res.output
    for f in (ws / "checkpoint").glob("step10-*"):
        f.unlink()
    (aside,) = ws.glob("checkpoint.before-*")
    return aside / "step40-worker0"


def test_an_untrained_step_0_is_never_the_default_beside_a_trained_one_moved_aside(job, tmp_path):
    conf, ws, x = job
    trained = _killed_second_run(conf, ws)
    step0 = ws / "checkpoint" / "step0-worker0"
    for name, args in _uses(conf, ws, x, tmp_path).items():
        res = invoke(*args)
        assert res.exit_code == 2, (name, res.output)
        first = res.output.splitlines()[0]
        assert first.startswith(f"{ws / 'checkpoint'}: error: "), (name, first)
        assert "step 0, an untrained model" in first and f"{trained} holds step 40" in first
        assert f"--checkpoint {trained} for the trained model" in res.output
        assert f"--checkpoint {step0} for the untrained one" in res.output
        assert not re.search(r"^checkpoint: ", res.output, re.M)  # nothing was used
    res = invoke("train", conf, "--workspace", ws, "--resume")
    assert res.exit_code == 2 and "step 0, an untrained model" in res.output.splitlines()[0]
    assert "--resume-from 0 for the untrained one" in res.output
    # asked for explicitly, either is used
    res = invoke("predict", conf, x, "--checkpoint", step0)
    assert res.exit_code == 0 and _step_used(res.output) == 0, res.output
    res = invoke("predict", conf, x, "--checkpoint", trained)
    assert res.exit_code == 0 and _step_used(res.output) == 40, res.output
    res = invoke("train", conf, "--workspace", ws, "--resume-from", "0", "-o", "train_steps=5")
    assert res.exit_code == 0, res.output


def test_step_0_beside_a_newer_unverifiable_step_is_refused_too(job):
    conf, ws, x = job
    d = ws / "checkpoint"
    for s in (20, 40):
        ck.manifest_path(d / f"step{s}-worker0").unlink()
    res = invoke("predict", conf, x, "--workspace", ws)
    assert res.exit_code == 2, res.output
    first = res.output.splitlines()[0]
    assert "step 0, an untrained model" in first and "has no manifest" in first
    assert f"--checkpoint {d / 'step40-worker0'} for the trained model" in res.output


def test_the_commands_and_resume_call_the_one_function(job, tmp_path, monkeypatch):
    conf, ws, x = job
    calls = []
    choose = ck.choose_checkpoint

    def spy(workspace, step=None, *, resume=False):
        calls.append(resume)
        return choose(workspace, step, resume=resume)

    monkeypatch.setattr(ck, "choose_checkpoint", spy)
    for name, args in _uses(conf, ws, x, tmp_path).items():
        calls.clear()
        assert invoke(*args).exit_code == 0, name
        assert calls and not any(calls), name
    calls.clear()
    invoke("train", conf, "--workspace", ws, "--resume", "-o", "train_steps=50", "-q")
    assert calls and calls[0] is True


def test_the_guard_never_calls_an_unverifiable_checkpoint_intact(job):
    conf, ws, _ = job
    d = ws / "checkpoint"
    for f in d.glob("*" + ck.MANIFEST_SUFFIX):
        f.unlink()  # none verifiable: the newest, step 40, is used after a structural check
    newest = d / "step40-worker0"
    records = ck.read_params(newest)
    records[0].value.reshape(-1)[0] = np.nan  # a flipped weight its manifest would have caught
    newest.write_bytes(ck.encode_params(records))
    res = invoke("train", conf, "--workspace", ws, "--resume", "-o", "train_steps=60")
    assert res.exit_code == 3, res.output
    assert "intact" not in res.output, res.output
    assert f"{d / 'step40-worker0'} (step 40); it has no manifest, so it cannot be verified" in (
        res.output
    )
    assert "this run resumed from it" in res.output


def test_the_guard_says_a_verified_checkpoint_it_resumed_from_is_where_it_stops_again(job):
    conf, ws, _ = job
    res = invoke("train", conf, "--workspace", ws, "--resume", "-o", "train_steps=60",
                 "-o", "updater.learning_rate.base_lr=1e38")  # fmt: skip
    assert res.exit_code == 3, res.output
    assert "(step 40); it is intact (its manifest verified it); this run resumed from it" in (
        res.output
    )
