"""Issue 21 point 5: with no thread count set (job.conf or environment) the in-process
engine times 1 against every usable CPU on the net's matrix products, keeps the faster
(N only when clearly faster), says so, and records the count in the checkpoint so that a
resume continues with it, exactly. A step 10x slower than the median says so."""

from __future__ import annotations

import io
import shutil

import pytest
from typer.testing import CliRunner

from singa_core.blas import (
    THREAD_ENV_VARS,
    blas_threads_set_by,
    faster_thread_count,
    get_blas_threads,
)
from singa_core.commands.cli import app
from singa_core.running import checkpoint as ckpt
from singa_core.running.reporting import Reporter
from singa_core.schema import job_pb2

runner = CliRunner()


@pytest.fixture
def no_thread_env(monkeypatch):
    for name in THREAD_ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    before = get_blas_threads()
    yield
    if before is not None:
        from singa_core.blas import set_blas_threads

        set_blas_threads(before)


def test_what_sets_the_threads():
    j = job_pb2.JobProto()
    assert blas_threads_set_by(j, {}) is None
    assert blas_threads_set_by(j, {"OMP_NUM_THREADS": "2"}) == "OMP_NUM_THREADS"
    assert blas_threads_set_by(j, {"MKL_NUM_THREADS": "1"}) == "MKL_NUM_THREADS"
    assert blas_threads_set_by(j, {"OPENBLAS_NUM_THREADS": "0"}) is None  # not usable
    j.num_openblas_threads = 1
    assert blas_threads_set_by(j, {"OPENBLAS_NUM_THREADS": "3"}) == "num_openblas_threads"


def test_n_threads_are_kept_only_when_clearly_faster():
    assert faster_thread_count({1: [0.10, 0.11, 0.10], 2: [0.095, 0.09, 0.094]})[0] == 1
    n, why = faster_thread_count({1: [0.10, 0.11, 0.10], 2: [0.06, 0.05, 0.07]})
    assert n == 2
    assert why == (
        "median step 100.0 ms at 1 thread, 60.0 ms at 2 (slowest 70.0 ms) over 3+3 trial "
        "steps; 2 are kept only when every step is at least 10% faster"
    )
    assert faster_thread_count({1: [0.1], 2: [0.3]})[0] == 1  # a busy machine
    # one N-thread step as slow as 1 thread (a competitor's turn): 1 is kept
    assert faster_thread_count({1: [0.10, 0.10, 0.10], 2: [0.05, 0.05, 0.095]})[0] == 1


def test_the_count_is_recorded_and_a_resume_uses_it_exactly(small_job, no_thread_env, tmp_path):
    conf, ws = small_job(steps=40, checkpoint_freq=20)
    args = ["train", str(conf), "--seed", "3", "-q", "--no-tensorboard"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "BLAS threads: " in res.output and "automatic" in res.output
    files = {s: ws / "checkpoint" / f"step{s}-worker0" for s in (20, 40)}
    recorded = ckpt.read_state(str(files[20]) + ckpt.STATE_SUFFIX).meta["blas_threads"]
    assert recorded >= 1
    full = files[40].read_bytes()
    # a resume from step 20 (its step-40 checkpoint removed) continues with the recorded count
    shutil.rmtree(ws / "checkpoint" / "step40-worker0", ignore_errors=True)
    for extra in (ws / "checkpoint").glob("step40-worker0*"):
        extra.unlink()
    res = runner.invoke(app, [*args, "--resume"])
    assert res.exit_code == 0, res.output
    assert f"BLAS threads: {recorded} (automatic, recorded in the checkpoint" in res.output
    assert files[40].read_bytes() == full


def test_a_step_ten_times_slower_than_the_median_is_a_note():
    err = io.StringIO()
    r = Reporter(out=io.StringIO(), err=err, live=False)
    r.start(0, 100, seed=1, resumed=False)
    for step in range(6):
        r.step_done(step, 0.1)
    assert "slow step" not in err.getvalue()
    r.step_done(6, 0.9)  # 9x: no note
    assert "slow step" not in err.getvalue()
    r.step_done(7, 1.5)
    assert "slow step: step 8 took 1.5 s, 15x the median 100.0 ms so far" in err.getvalue()


@pytest.mark.parametrize("net", ["dropout", "batch-norm"])
def test_the_trial_steps_change_nothing(small_job, no_thread_env, tmp_path, net):
    """A run whose count was chosen by the trial ends exactly as a run told that count (the
    trial's steps are undone, also the running statistics kBM writes into its Params): the
    seed's repeatability holds for a given count."""
    if net == "dropout":
        conf, ws = small_job(steps=30, checkpoint_freq=30, dropout=True)
    else:
        from test_non_learnable_params import bn_job

        conf, ws = bn_job(tmp_path, steps=30, checkpoint_freq=30)
    args = ["train", str(conf), "--seed", "4", "-q", "--no-tensorboard"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    final = ws / "checkpoint" / "step30-worker0"
    n = ckpt.read_state(str(final) + ckpt.STATE_SUFFIX).meta["blas_threads"]
    auto = final.read_bytes()
    shutil.rmtree(ws)
    res = runner.invoke(app, [*args, "-o", f"num_openblas_threads={n}"])
    assert res.exit_code == 0, res.output
    assert final.read_bytes() == auto
