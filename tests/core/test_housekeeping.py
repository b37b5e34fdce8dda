"""Housekeeping: stale temp files are removed, --keep-checkpoints keeps the N newest plus
marked ones, a resumed run never repeats a logged evaluation (its output continues the
interrupted run's exactly), and a few messages stay short and clear."""

from __future__ import annotations

import json

import pytest
from conftest import invoke_singa as invoke
from conftest import singa_ok as ok

from singa_core.running import checkpoint as ck


def metric_records(ws):
    """metrics.jsonl's metric records (not the run events), without their time stamps."""
    out = []
    for line in (ws / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if "event" not in rec:
            rec.pop("time")
            out.append(rec)
    return out


def printed(res) -> list[str]:
    return [x for x in res.stdout.splitlines() if x.split(" ")[0] in ("Train", "Test")]


def test_a_new_run_removes_stale_temp_files_and_says_so(small_job):
    conf, ws = small_job(steps=5)
    d = ws / "checkpoint"
    d.mkdir(parents=True)
    stale = [
        d / ".step40-worker0.a1b2c3d4.tmp",  # a params file killed mid-write
        d / ".step40-worker0.state.npz.x_9zk2mq.tmp",
        d / ".step40-part1.layers.json",  # an shm partition's hand-over
        ws / ".metrics.jsonl.abcdefgh.tmp",
    ]
    for f in stale:
        f.write_bytes(b"partial")
    keep = [d / "notes.txt", ws / "my.tmp"]  # not singa's
    for f in keep:
        f.write_text("mine")
    res = ok("train", conf)
    assert "removed 4 temporary file(s)" in res.output
    assert ".step40-worker0.a1b2c3d4.tmp" in res.output
    assert not any(f.exists() for f in stale)
    assert all(f.exists() for f in keep)
    assert "temporary" not in ok("train", conf).output  # nothing left the second time


def test_keep_checkpoints_keeps_the_newest_and_the_marked(small_job):
    conf, ws = small_job(steps=60, checkpoint_freq=10)
    d = ws / "checkpoint"
    d.mkdir(parents=True)
    (d / "step20.keep").touch()  # marked before the run: survives
    ok("train", conf, "--keep-checkpoints", "2", "-q")
    assert sorted(ck.checkpoint_steps(ws)) == [20, 50, 60]
    left = sorted(f.name for f in d.iterdir())
    assert left == sorted(
        [f"step{s}-worker0{x}" for s in (20, 50, 60) for x in ("", ".state.npz", ".manifest.json")]
        + ["step20.keep"]
    )
    # the JobProto field does the same; marking one afterwards protects it from then on
    (d / "step50.keep").touch()
    ok("train", conf, "--resume", "-o", "train_steps=90", "-o", "keep_checkpoints=1", "-q")
    assert sorted(ck.checkpoint_steps(ws)) == [20, 50, 90]


def test_keep_checkpoints_must_not_be_negative(small_job):
    conf, _ = small_job(steps=5)
    res = invoke("train", conf, "--keep-checkpoints", "-1")
    assert res.exit_code == 2
    assert res.output.startswith("--keep-checkpoints: error: --keep-checkpoints is -1;")
    res = invoke("train", conf, "-o", "keep_checkpoints=-1")  # job.conf's field, by -o
    assert res.exit_code == 2 and "keep_checkpoints must not be negative" in res.output


def _uninterrupted(small_job_conf, tmp_path):
    conf = small_job_conf
    ws = tmp_path / "whole"
    res = ok("train", conf, "--seed", "7", "--workspace", ws)
    return printed(res), metric_records(ws)


@pytest.mark.parametrize("resume_at", [0, 30, 40])
def test_resuming_after_a_kill_repeats_no_logged_evaluation(small_job, tmp_path, resume_at):
    """A run killed after writing checkpoint S (tests at 0 and 30 log before the checkpoint of
    their step): its resumed continuation prints and logs exactly the uninterrupted run's."""
    conf, ws = small_job(steps=60, checkpoint_freq=10)
    lines, records = _uninterrupted(conf, tmp_path)
    assert "Test step-0, " in lines[0] and any(x.startswith("Test step-30") for x in lines)
    ok("train", conf, "--seed", "7")
    for s, files in ck.checkpoint_steps(ws).items():  # as if killed right after step S's
        if s > resume_at:
            for f in files:
                for g in f.parent.glob(f.name + "*"):
                    g.unlink()
    res = ok("train", conf, "--resume")
    assert f"resuming at step {resume_at}" in res.output
    # printed: exactly the uninterrupted lines after the checkpoint (no repeated Test)
    first = next(
        i
        for i, x in enumerate(lines)
        if x.startswith(f"Train step-{resume_at},")
        or (x.startswith("Test step-") and int(x.split("-")[1].split(",")[0]) > resume_at)
    )
    assert printed(res) == lines[first:]
    assert metric_records(ws) == records


def test_resuming_a_stopped_run_continues_its_output_exactly(small_job, tmp_path):
    """A run that stopped at step 30 (its final checkpoint; the test at 30 not yet run)."""
    conf, ws = small_job(steps=60, checkpoint_freq=10)
    lines, records = _uninterrupted(conf, tmp_path)
    first = ok("train", conf, "--seed", "7", "-o", "train_steps=30")
    second = ok("train", conf, "--resume")
    assert printed(first) + printed(second) == lines
    assert metric_records(ws) == records


def test_resume_past_train_steps_says_so(small_job):
    conf, ws = small_job(steps=45, checkpoint_freq=15)
    ok("train", conf, "-q")
    res = ok("train", conf, "--resume", "-o", "train_steps=40")
    assert "the checkpoint to resume from is step 45, at or past train_steps (40)" in res.output
    assert "nothing to train" in res.output and "ms/step" not in res.output


def test_a_deeply_nested_config_error_is_short(tmp_path):
    conf = tmp_path / "deep.conf"
    conf.write_text('name: "x"\nneuralnet ' + "{ " * 10000 + "}" * 10000 + "\n")
    res = invoke("train", conf, "--dry-run")
    assert res.exit_code == 2 and f"{conf}:2:" in res.output
    assert len(res.output) < 1000, len(res.output)
    assert "more characters" in res.output


@pytest.mark.slow
def test_the_shm_engine_resumes_without_repeating_an_evaluation(small_job, tmp_path):
    conf, ws = small_job(steps=40, checkpoint_freq=10)
    lines, records = _uninterrupted(conf, tmp_path)  # in-process: the shm engine matches it
    ok("train", conf, "--seed", "7", "--engine", "shm")
    for s, files in ck.checkpoint_steps(ws).items():  # as if killed right after step 30's
        if s > 30:
            for f in files:
                for g in f.parent.glob(f.name + "*"):
                    g.unlink()
    res = ok("train", conf, "--resume", "--engine", "shm")
    assert "resuming at step 30" in res.output and "Test step-30" not in res.stdout
    assert printed(res) == [x for x in lines if int(x.split("-")[1].split(",")[0]) >= 30][1:]
    assert metric_records(ws) == records
