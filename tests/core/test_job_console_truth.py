"""The local console tells the truth (issue 37 point 3): the runner killed leaves no
training behind, ids are literal, damaged records are listed as damaged, two stops stop
once, a job's progress is its own, another machine's job is not judged by this /proc."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from singa_core.api import jobs as api
from tests.conftest import needs, run_singa


@pytest.fixture
def jobs(tmp_path, monkeypatch):
    folder = tmp_path / "jobs"
    monkeypatch.setenv("SINGA_JOBS_DIR", str(folder))
    return folder


def _singa(*args, timeout=120):
    return run_singa(*args, env={"SINGA_JOBS_DIR": os.environ["SINGA_JOBS_DIR"]},
                     timeout=timeout)  # fmt: skip


def _wait(folder, cond, timeout=120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = api.job_info(folder)
        if cond(info):
            return info
        time.sleep(0.1)
    raise AssertionError(f"never reached the condition: {info}")


def _record(folder: Path, **fields) -> None:
    """A job folder written by hand (as another machine or an older version would)."""
    folder.mkdir(parents=True)
    data = dict(id=folder.name, name="n", conf="/x/job.conf", args=[], engine="auto",
                host="elsewhere", workspace=str(folder / "ws"), submitted=time.time(),
                cwd="/", runner_pid=0, runner_start="", machine="other-boot/pid:[1]")  # fmt: skip
    data.update(fields)
    (folder / "job.json").write_text(json.dumps(data))
    (folder / "log").write_text("")


def _no_process_with(text: str) -> bool:
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if text.encode() in (d / "cmdline").read_bytes():
                    return False
            except OSError:
                pass
    return True


# -- the runner killed ------------------------------------------------------------------------
@pytest.mark.slow
def test_a_killed_runner_leaves_no_training_behind(jobs, small_job):
    """kill -9 of the runner: the training gets SIGTERM (PR_SET_PDEATHSIG), stops after
    its step with a checkpoint and frees the workspace; the console follows it by its pid
    until then and then says what happened."""
    conf, ws = small_job(steps=1_000_000)
    rec = api.submit(conf, ["-o", "disp_freq=100"])
    folder = jobs / rec.id
    info = _wait(folder, lambda i: i.step is not None and i.record.training_pid)
    training = info.record.training_pid
    os.kill(info.record.runner_pid, signal.SIGKILL)
    t0 = time.monotonic()
    while api.training_alive(info.record) and time.monotonic() - t0 < 30:
        time.sleep(0.02)
    assert not api.training_alive(info.record), "the training outlived its runner"
    assert time.monotonic() - t0 < 10
    ended = api.job_info(folder)
    assert ended.state == "failed" and "kill -9" in ended.message, ended
    assert "interrupted at step" in ended.message  # its log's last line: the checkpoint
    assert list((ws / "checkpoint").glob("step*-worker0"))
    assert _no_process_with(str(conf)) and training
    # the workspace is free: --resume runs
    res = run_singa("train", str(conf), "--resume", "-o", "train_steps=1")
    assert "workspace" not in res.stderr or "in use" not in res.stderr, res.stderr


def test_a_job_whose_runner_died_is_followed_by_its_training(jobs, tmp_path):
    """Runner gone, training alive: running (named), and stop signals the training."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        start = api.process_start(sleeper.pid)
        _record(jobs / "aaa111", host=os.uname().nodename, machine=api.machine_id(),
                runner_pid=999_999_999, runner_start="1", training_pid=sleeper.pid,
                training_start=start)  # fmt: skip
        info = api.job_info(jobs / "aaa111")
        assert info.state == "running" and "runner was killed" in info.message
        result = api.stop("aaa111")
        assert result.sent
        assert sleeper.wait(10) == -signal.SIGTERM
        ended = api.job_info(jobs / "aaa111")
        assert ended.state == "stopped", ended
    finally:
        sleeper.kill()


# -- ids, damaged records, missing logs --------------------------------------------------------
@pytest.mark.slow
def test_ids_are_literal_and_damaged_records_are_listed(jobs):
    _record(jobs / "abc123")
    broken = {
        "d00001": "{}",
        "d00002": "[]",
        "d00003": "1",
        "d00004": json.dumps({**json.loads((jobs / "abc123" / "job.json").read_text()), "name": 3}),
        "d00005": "{not json",
    }
    for name, text in broken.items():
        (jobs / name).mkdir()
        (jobs / name / "job.json").write_text(text)
    _record(jobs / "e00001", host=os.uname().nodename, machine=api.machine_id())
    (jobs / "e00001" / "exit.json").write_text("[]")
    _record(jobs / "f00001", host=os.uname().nodename, machine=api.machine_id())
    (jobs / "f00001" / "exit.json").write_text(json.dumps({"exit_code": 0, "time": 1}))
    (jobs / "f00001" / "log").unlink()

    infos = {i.record.id: i for i in api.list_jobs()}
    for name in [*broken, "e00001"]:
        assert infos[name].state == "damaged", infos[name]
        assert "damaged" in infos[name].message
    assert "lacks" in infos["d00001"].message and "[]" in infos["d00002"].message
    assert "name is 3" in infos["d00004"].message and "not JSON" in infos["d00005"].message
    assert infos["f00001"].state == "finished"

    table = _singa("jobs")
    assert table.returncode == 0 and "Traceback" not in table.stderr, table.stderr
    assert table.stdout.count("damaged") >= 2 * len(broken)  # the state and what is wrong
    listed = _singa("jobs", "--json")
    assert {j["id"]: j["state"] for j in json.loads(listed.stdout)}["d00002"] == "damaged"

    for args in (["logs", "**x"], ["stop", "/etc"], ["logs", "../jobs"], ["stop", "[a]"],
                 ["logs", ""]):  # fmt: skip
        res = _singa(*args)
        assert res.returncode == 2 and "Traceback" not in res.stderr, (args, res.stderr)
        assert "no job" in res.stderr and "abc123" in res.stderr and "help:" in res.stderr
    res = _singa("stop", "d00002")
    assert res.returncode == 2 and "damaged" in res.stderr and "Traceback" not in res.stderr
    res = _singa("logs", "f00001")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert str(jobs / "f00001" / "log") in res.stderr and "help:" in res.stderr


def test_a_job_that_ends_while_it_is_looked_at_is_read_as_ended(jobs, monkeypatch):
    """The training writes its last line, the runner exit.json, then both are gone: a look
    whose check of the processes finds them gone reads the files after that check, so the
    job is finished with its exit status and last step, not killed without an exit status."""
    folder = jobs / "e00002"
    _record(folder, host=os.uname().nodename, machine=api.machine_id())

    def ends_now(record):  # the job ends at the moment its processes are looked at
        if not (folder / "exit.json").exists():
            (folder / "log").write_text("Train step-30, loss 0.1\nfinished at step 40\n")
            (folder / "exit.json").write_text(json.dumps({"exit_code": 0, "time": 1}))
        return False

    monkeypatch.setattr(api, "runner_alive", ends_now)
    monkeypatch.setattr(api, "training_alive", ends_now)
    info = api.job_info(folder)
    assert info.state == "finished" and info.exit_code == 0 and info.step == 40, info


# -- another machine's job ---------------------------------------------------------------------
def test_another_machines_job_keeps_its_host_and_last_state(jobs):
    _record(jobs / "b00001", runner_pid=os.getpid(), runner_start="1")
    info = api.job_info(jobs / "b00001")
    assert info.state == "running" and not info.checked and "elsewhere" in info.message
    with pytest.raises(api.SingaError, match="runs on elsewhere"):
        api.stop("b00001")
    (jobs / "b00001" / "exit.json").write_text(json.dumps({"exit_code": 0, "time": 1}))
    assert api.job_info(jobs / "b00001").state == "finished"
    # this host's record from an earlier boot: that machine restarted, the job is gone
    ns = api.machine_id().split("/", 1)[1]
    _record(jobs / "b00002", host=os.uname().nodename, machine=f"old-boot/{ns}",
            runner_pid=os.getpid(), runner_start=api.process_start(os.getpid()))  # fmt: skip
    restarted = api.job_info(jobs / "b00002")
    assert restarted.state == "failed" and "restarted" in restarted.message


# -- two stops, progress of its own ------------------------------------------------------------
@pytest.mark.slow
def test_two_stops_stop_once_and_progress_is_the_jobs_own(jobs, small_job):
    """Two `singa stop` at once: one SIGTERM, exit 143 with a checkpoint, the log names
    `singa stop ID --now`. The job resumed as a new job in the same workspace: each row
    shows its own steps; a finished job shows its last step, not its last displayed one,
    and the engine it ran with."""
    conf, ws = small_job(steps=1_000_000)
    first = api.submit(conf, ["-o", "disp_freq=100"])
    folder = jobs / first.id
    _wait(folder, lambda i: i.step is not None and i.step >= 100)
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}
    cmd = [sys.executable, "-m", "singa_core.commands.cli", "stop", first.id]
    # The job is held (SIGSTOP) while both stops run: a small job checkpoints and ends
    # faster than a second interpreter starts, and then the second stop rightly finds it
    # stopped. Held, it is still running for both; the SIGTERM waits until it continues.
    rec = api.job_info(folder).record
    held = [pid for pid in (rec.runner_pid, rec.training_pid) if pid]
    for pid in held:
        os.kill(pid, signal.SIGSTOP)
    try:
        procs = [subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
                 for _ in "ab"]  # fmt: skip
        outs = [p.communicate(timeout=60)[1] for p in procs]
    finally:
        for pid in held:
            os.kill(pid, signal.SIGCONT)
    assert [p.returncode for p in procs] == [0, 0], outs
    assert sum("already stopping" in o for o in outs) == 1, outs
    stopped = _wait(folder, lambda i: i.state != "running")
    assert stopped.state == "stopped" and stopped.exit_code == 143, stopped
    log = (folder / "log").read_text()
    assert f"`singa stop {first.id} --now` to abort now" in log and "Ctrl-C" not in log
    assert stopped.engine == "inprocess" and stopped.step is not None
    step_at_stop = stopped.step
    assert f"interrupted at step {step_at_stop}" in log
    res = _singa("stop", first.id)  # over: a located refusal
    assert res.returncode == 2 and "not running: it stopped" in res.stderr

    second = api.submit(conf, ["--resume", "-o", f"train_steps={step_at_stop + 37}",
                               "-o", "disp_freq=1000"])  # fmt: skip
    done = _wait(jobs / second.id, lambda i: i.state != "running")
    assert done.state == "finished", (done, (jobs / second.id / "log").read_text())
    assert done.step == step_at_stop + 37 and done.total == step_at_stop + 37
    again = api.job_info(folder)
    assert again.step == step_at_stop and again.total == 1_000_000, again
    assert again.metrics == stopped.metrics
    assert _singa("jobs").stdout.count(" inprocess ") == 2


# -- a job submitted to a cluster ---------------------------------------------------------------
@needs("ray")
@pytest.mark.slow
def test_a_cluster_that_does_not_answer_lists_its_jobs_as_unknown(jobs):
    """This machine's pointer to a job it submitted to a cluster: `singa jobs` shows it
    unknown (its registry is the cluster's); `singa jobs --address` of a cluster that does
    not answer is a located error listing it as unknown, naming the address, never running."""
    gone = "127.0.0.1:1"
    _record(jobs / "c00001", host=os.uname().nodename, machine=api.machine_id(), cluster=gone)
    info = api.job_info(jobs / "c00001")
    assert info.state == "unknown" and f"--address {gone}" in info.message
    res = _singa("jobs", "--address", gone, "--json")
    assert res.returncode == 2 and "--address: error:" in res.stderr, res.stderr
    (rec,) = json.loads(res.stdout)
    assert rec["id"] == "c00001" and rec["state"] == "unknown" and gone in rec["message"]
    res = _singa("jobs", "--address", gone)
    assert res.returncode == 2 and "unknown" in res.stdout and "running" not in res.stdout
    for args in (["logs", "c00001"], ["stop", "c00001"]):
        res = _singa(*args, "--address", gone)
        assert res.returncode == 2 and "Traceback" not in res.stderr and "help:" in res.stderr
