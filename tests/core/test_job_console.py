"""singa submit / jobs / logs / stop: jobs detached from the terminal, listed with their
true state (issue: SINGA 0.3's console). Local jobs; each test has its own jobs folder."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from tests.conftest import run_singa


@pytest.fixture
def jobs(tmp_path, monkeypatch):
    folder = tmp_path / "jobs"
    monkeypatch.setenv("SINGA_JOBS_DIR", str(folder))
    return folder


def _singa(*args, timeout=120):
    return run_singa(*args, env={"SINGA_JOBS_DIR": os.environ["SINGA_JOBS_DIR"]},
                     timeout=timeout)  # fmt: skip


def _submit(conf, *args) -> str:
    res = _singa("submit", str(conf), *args)
    assert res.returncode == 0, res.stderr
    job_id = res.stdout.strip()
    assert len(job_id) == 6 and f"singa logs {job_id} -f" in res.stderr
    return job_id


def _info(job_id):
    res = _singa("jobs", "--json")
    assert res.returncode == 0, res.stderr
    (info,) = [j for j in json.loads(res.stdout) if j["id"] == job_id]
    return info


def _wait(job_id, cond, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = _info(job_id)
        if cond(info):
            return info
        time.sleep(0.3)
    raise AssertionError(f"job {job_id} never reached the condition: {info}")


@pytest.mark.slow
def test_a_job_runs_detached_and_finishes(jobs, small_job):
    conf, ws = small_job(steps=40)
    job_id = _submit(conf)
    info = _wait(job_id, lambda i: i["state"] != "running")
    assert info["state"] == "finished" and info["exit_code"] == 0, info
    assert info["name"] == "small" and info["workspace"] == str(ws.resolve())
    assert info["total"] == 40 and info["step"] is not None
    assert "loss" in info["metrics"]
    log = _singa("logs", job_id)
    assert "finished at step 40" in log.stdout
    table = _singa("jobs").stdout
    assert job_id in table and "finished" in table and "40" in table


@pytest.mark.slow
def test_the_runner_has_no_terminal_and_ignores_hangups(jobs, small_job):
    conf, _ = small_job(steps=100000)
    job_id = _submit(conf, "-o", "disp_freq=50")
    folder = jobs / job_id
    record = json.loads((folder / "job.json").read_text())
    pid = record["runner_pid"]
    assert os.getsid(pid) == pid != os.getsid(0)  # a session of its own
    tty = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[4])
    assert tty == 0  # no controlling terminal: closing the ssh session cannot reach it
    _wait(job_id, lambda i: i["step"] is not None)
    os.kill(pid, signal.SIGHUP)  # what a closing terminal sends
    time.sleep(1.0)
    assert _info(job_id)["state"] == "running"
    res = _singa("stop", job_id[:3])  # a unique prefix will do
    assert res.returncode == 0, res.stderr
    info = _wait(job_id, lambda i: i["state"] != "running")
    assert info["state"] == "stopped" and info["exit_code"] == 143, info
    assert list((Path(info["workspace"]) / "checkpoint").glob("step*-worker0"))
    assert "continue with --resume" in _singa("logs", job_id).stdout


@pytest.mark.slow
def test_stop_now_kills_without_a_checkpoint(jobs, small_job):
    conf, ws = small_job(steps=100000)
    job_id = _submit(conf)
    _wait(job_id, lambda i: i["step"] is not None)
    assert _singa("stop", job_id, "--now").returncode == 0
    info = _wait(job_id, lambda i: i["state"] != "running")
    assert info["state"] == "stopped" and "--now" in info["message"]


def test_a_failing_job_shows_its_exit_and_error(jobs, small_job, tmp_path):
    conf, _ = small_job(steps=10)
    text = conf.read_text().replace("blobs.csv", "gone.csv")
    conf.write_text(text)
    job_id = _submit(conf)
    info = _wait(job_id, lambda i: i["state"] != "running")
    assert info["state"] == "failed" and info["exit_code"] == 2
    assert "error:" in info["message"] and "gone.csv" in info["message"]
    table = _singa("jobs").stdout
    assert "failed (exit 2)" in table and "gone.csv" in table


def test_mistakes_are_reported_at_submit(jobs, tmp_path):
    bad = tmp_path / "bad.conf"
    bad.write_text("train_steps: ten\n")
    res = _singa("submit", str(bad))
    assert res.returncode == 2 and f"{bad}:1:" in res.stderr and "Traceback" not in res.stderr
    for args in (["logs", "nosuch"], ["stop", "nosuch"]):
        res = _singa(*args)
        assert res.returncode == 2 and "no job 'nosuch'" in res.stderr and "help:" in res.stderr


@pytest.mark.slow
def test_logs_follow_until_the_job_ends(jobs, small_job):
    conf, _ = small_job(steps=60)
    job_id = _submit(conf)
    res = _singa("logs", job_id, "-f")
    assert res.returncode == 0 and "finished at step 60" in res.stdout


def test_the_same_from_python(jobs, small_job):
    from singa_core.api import jobs as api

    conf, _ = small_job(steps=20)
    record = api.submit(conf, ["--seed", "3"])
    folder = api.find(record.id)
    deadline = time.monotonic() + 120
    while api.job_info(folder).state == "running" and time.monotonic() < deadline:
        time.sleep(0.2)
    (info,) = [i for i in api.list_jobs() if i.record.id == record.id]
    assert info.state == "finished" and info.record.args == ["--seed", "3"]
    assert any("seed 3" in line for line in api.follow_log(folder, follow=False))
