"""The BLAS thread rule: job.conf's num_openblas_threads, else the user's
OPENBLAS_NUM_THREADS, else OMP_NUM_THREADS, else the engine's default (all cores in-process)."""

from __future__ import annotations

import os

import pytest
from typer.testing import CliRunner

from singa_core.blas import (
    THREAD_ENV_VARS,
    blas_threads_for,
    get_blas_threads,
    set_blas_threads,
)
from singa_core.commands.cli import app
from singa_core.resources import usable_cpus
from singa_core.schema import job_pb2

runner = CliRunner()


def job(threads=None):
    j = job_pb2.JobProto()
    if threads is not None:
        j.num_openblas_threads = threads
    return j


@pytest.mark.parametrize(
    ("conf", "environ", "expected"),
    [
        (None, {}, 7),  # nothing set: the engine's default
        (None, {"OPENBLAS_NUM_THREADS": "3"}, 3),
        (None, {"OMP_NUM_THREADS": "2"}, 2),
        (None, {"MKL_NUM_THREADS": "1"}, 1),  # MKL's, singa's SGEMM with the mkl extra
        (None, {"MKL_NUM_THREADS": "3", "OMP_NUM_THREADS": "4"}, 3),  # before OpenMP's
        (None, {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "4"}, 1),  # OpenBLAS first
        (5, {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "4"}, 5),  # job.conf wins
        (1, {}, 1),  # set to its own default value: still set
        (None, {"OPENBLAS_NUM_THREADS": "0", "OMP_NUM_THREADS": "4,2"}, 7),  # not usable
        (None, {"OPENBLAS_NUM_THREADS": " 2 "}, 2),
        (None, {"OMP_NUM_THREADS": "many"}, 7),
    ],
)
def test_rule(conf, environ, expected):
    assert blas_threads_for(job(conf), 7, environ) == expected


def test_default_is_at_least_one():
    assert blas_threads_for(job(), 0, {}) == 1


@pytest.fixture
def restore_threads():
    before = get_blas_threads()
    if before is None:
        pytest.skip("numpy has no OpenBLAS to pin")
    yield
    set_blas_threads(before)


def test_dry_run_tells_the_threads(small_job, monkeypatch):
    conf, _ = small_job()
    for name in THREAD_ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    res = runner.invoke(app, ["train", str(conf), "--dry-run"])
    assert res.exit_code == 0, res.output
    assert "server 0 of group 0; 1 BLAS thread(s): set by OPENBLAS_NUM_THREADS)" in res.output
    res = runner.invoke(app, ["train", str(conf), "--dry-run", "-o", "num_openblas_threads=2"])
    assert "; 2 BLAS thread(s): set by num_openblas_threads)" in res.output
    monkeypatch.delenv("OPENBLAS_NUM_THREADS")
    res = runner.invoke(app, ["train", str(conf), "--dry-run"])
    if usable_cpus() == 1:
        assert "; 1 BLAS thread(s): automatic: 1 CPU usable)" in res.output
    else:  # the faster of 1 and all, timed on the first steps
        assert f"; BLAS threads: automatic: 1 or {usable_cpus()}, whichever" in res.output


@pytest.mark.parametrize("var", ["OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"])
def test_training_runs_with_the_users_threads(small_job, monkeypatch, restore_threads, var):
    conf, _ = small_job()
    for name in THREAD_ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    other = 2 if (os.cpu_count() or 1) == 1 else 1
    set_blas_threads(other + 1)  # something else first, to see the engine set it
    monkeypatch.setenv(var, str(other))
    res = runner.invoke(app, ["train", str(conf), "-q", "-o", "train_steps=2"])
    assert res.exit_code == 0, res.output
    assert get_blas_threads() == other
    # job.conf's field still wins over the environment
    res = runner.invoke(
        app, ["train", str(conf), "-q", "-o", "train_steps=2", "-o", "num_openblas_threads=3"]
    )
    assert res.exit_code == 0, res.output
    assert get_blas_threads() == 3


def test_shared_memory_engine_follows_the_rule(small_job, monkeypatch):
    conf, _ = small_job()
    for name in THREAD_ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "3")
    res = runner.invoke(app, ["train", str(conf), "--dry-run", "--engine", "shm"])
    assert res.exit_code == 0, res.output
    assert "3 BLAS thread(s) per process" in res.output
    res = runner.invoke(
        app, ["train", str(conf), "--dry-run", "--engine", "shm", "-o", "num_openblas_threads=1"]
    )
    assert "1 BLAS thread(s) per process" in res.output
