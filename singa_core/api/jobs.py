"""Jobs that outlive the terminal: submit, list, follow and stop (SINGA 0.3's
``singa-run.sh`` and ``singa-console.sh list | view | kill``).

:func:`submit` starts ``singa train JOB.conf ARGS`` detached from the calling terminal: a
small runner process (``python -m singa_core.api.jobrunner JOBDIR``) in a session of its
own, with no controlling terminal, starts the training with its output going to the job's
log, ignores hang-ups, passes SIGTERM/SIGINT on, and records how the training ended. Every
job has a folder in the jobs directory (``$SINGA_JOBS_DIR``, default ``~/.singa/jobs``):

* ``job.json``: id, name, the job.conf and arguments, engine, host, workspace, the time
  it was submitted, the runner's pid and start time (so a reused pid is not taken for it);
* ``log``: everything the training printed;
* ``exit.json``: written by the runner when the training ends (exit status or signal);
* ``stop.json``: written by :func:`stop` before it signals (so the state says "stopped").

The state (:func:`job_info`) is read from those files and the process table: running while
the runner lives; finished (exit 0), stopped (a stop asked for), failed with the exit
status and the last ``error:`` line; a runner that died without writing ``exit.json``
(``kill -9``, the machine restarted) is failed, never running. Progress (step of total, the
latest loss and accuracy) comes from the workspace's ``metrics.jsonl``.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from singa_core.contracts.errors import SingaError
from singa_core.running.fileio import atomic_write_bytes

JOBS_DIR_ENV = "SINGA_JOBS_DIR"


def jobs_dir() -> Path:
    return Path(os.environ.get(JOBS_DIR_ENV) or Path.home() / ".singa" / "jobs")


@dataclass
class JobRecord:
    """What ``job.json`` holds."""

    id: str
    name: str
    conf: str  # absolute path of the job.conf
    args: list[str]  # singa train's other arguments
    engine: str
    host: str
    workspace: str
    submitted: float
    cwd: str
    runner_pid: int = 0
    runner_start: str = ""  # /proc/<pid>/stat's start time: the pid is this runner's


@dataclass
class JobInfo:
    """A job as ``singa jobs`` shows it."""

    record: JobRecord
    state: str  # running, finished, failed, stopped
    exit_code: int | None = None
    message: str = ""  # why it failed
    step: int | None = None
    total: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict:
        d = asdict(self.record)
        d.update(
            state=self.state, exit_code=self.exit_code, message=self.message, step=self.step,
            total=self.total, metrics=self.metrics,
        )  # fmt: skip
        return d


# -- submitting ------------------------------------------------------------------------------
def job_workspace(conf: str | Path, args: list[str] = ()) -> str:
    """The workspace ``singa train CONF ARGS`` uses (``--workspace``, else job.conf's with
    the ``-o`` overrides), or "" when it names none."""
    from singa_core.jobconf.parse import load_job

    args = list(args)
    overrides = [args[i + 1] for i, a in enumerate(args[:-1]) if a in ("-o", "--override")]
    job = load_job(conf, overrides).job
    return _option(args, "--workspace") or (
        job.cluster.workspace if job.cluster.HasField("workspace") else ""
    )


def submit(conf: str | Path, args: list[str] = (), *, root: Path | None = None) -> JobRecord:
    """Start ``singa train CONF ARGS`` detached; returns its record once the runner runs.
    The job.conf is parsed first (with ``-o`` overrides), so its mistakes are reported here
    and not in a log."""
    from singa_core.jobconf.parse import load_job

    args = list(args)
    overrides = [args[i + 1] for i, a in enumerate(args[:-1]) if a in ("-o", "--override")]
    cfg = load_job(conf, overrides)
    job = cfg.job
    workspace = _option(args, "--workspace") or (
        job.cluster.workspace if job.cluster.HasField("workspace") else ""
    )
    if not workspace:
        raise SingaError(
            "job.conf names no workspace",
            where=cfg.locate("cluster"),
            help='add `cluster { workspace: "path/to/folder" }`, or --workspace DIR',
        )
    root = root or jobs_dir()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SingaError(
            f"cannot create the jobs folder {root}: {exc.strerror}",
            where=f"${JOBS_DIR_ENV}" if os.environ.get(JOBS_DIR_ENV) else str(root),
            help=f"set {JOBS_DIR_ENV} to a folder you can write",
        ) from None
    for _ in range(20):
        job_id = secrets.token_hex(3)
        folder = root / job_id
        try:
            folder.mkdir()
            break
        except FileExistsError:
            continue
    record = JobRecord(
        id=job_id,
        name=job.name or Path(conf).stem,
        conf=str(Path(conf).resolve()),
        args=args,
        engine=_option(args, "--engine") or "auto",
        host=socket.gethostname(),
        workspace=str(Path(workspace).resolve()),
        submitted=time.time(),
        cwd=os.getcwd(),
    )
    _write_json(folder / "job.json", asdict(record))
    (folder / "log").touch()
    runner = subprocess.Popen(
        [sys.executable, "-m", "singa_core.api.jobrunner", str(folder)],
        cwd=record.cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=open(folder / "runner.err", "wb"),  # noqa: SIM115 - the child keeps it
        start_new_session=True,  # no controlling terminal: closing the ssh session is fine
        close_fds=True,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # the runner records its pid and start time first
        rec = read_record(folder)
        if rec.runner_pid:
            return rec
        if runner.poll() is not None:
            break
        time.sleep(0.02)
    err = (folder / "runner.err").read_text(errors="replace").strip()
    raise SingaError(
        f"the job's runner did not start{': ' + err.splitlines()[-1] if err else ''}",
        where=str(folder),
        help="check that the jobs folder is writable and python can start",
    )


def _option(args: list[str], name: str) -> str | None:
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def _write_json(path: Path, data: dict) -> None:
    atomic_write_bytes(path, json.dumps(data, indent=1, sort_keys=True).encode(), "job record")


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def read_record(folder: Path) -> JobRecord:
    data = _read_json(folder / "job.json")
    if data is None:
        raise SingaError(
            f"{folder} is not a job folder (no readable job.json)",
            where=str(folder),
            help="`singa jobs` lists the jobs",
        )
    return JobRecord(**{k: data[k] for k in JobRecord.__dataclass_fields__ if k in data})


# -- the state of a job -----------------------------------------------------------------------
def process_start(pid: int) -> str:
    """The start time of process ``pid`` (field 22 of /proc/<pid>/stat), "" if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[19]


def runner_alive(record: JobRecord) -> bool:
    if not record.runner_pid:
        return False
    start = process_start(record.runner_pid)
    if not start or start != record.runner_start:
        return False
    try:
        state = Path(f"/proc/{record.runner_pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _last_error(log: Path) -> str:
    try:
        with open(log, "rb") as fh:
            fh.seek(max(0, fh.seek(0, 2) - 65536))
            lines = fh.read().decode(errors="replace").splitlines()
    except OSError:
        return ""
    for line in reversed(lines):
        if ": error: " in line or line.startswith("error: "):
            return line.strip()[:300]
    return lines[-1].strip()[:300] if lines else ""


def _progress(workspace: Path) -> tuple[int | None, int | None, dict[str, float]]:
    path = workspace / "metrics.jsonl"
    step = total = None
    metrics: dict[str, float] = {}
    try:
        with open(path, "rb") as fh:
            for raw in fh:
                try:
                    rec = json.loads(raw)
                except ValueError:
                    continue  # a torn last line
                if rec.get("event") == "start":
                    total = rec.get("train_steps")
                elif rec.get("phase") == "train":
                    step = rec.get("step")
                    metrics = {k: rec[k] for k in ("loss", "accuracy") if k in rec}
                elif rec.get("phase") == "test" and "accuracy" in rec:
                    metrics["test accuracy"] = rec["accuracy"]
                elif rec.get("event") == "end" and rec.get("step") is not None:
                    step = rec["step"]
    except OSError:
        pass
    return step, total, metrics


def job_info(folder: Path) -> JobInfo:
    record = read_record(folder)
    step, total, metrics = _progress(Path(record.workspace))
    info = JobInfo(record, "running", step=step, total=total, metrics=metrics)
    ended = _read_json(folder / "exit.json")
    stopped = (folder / "stop.json").exists()
    if ended is not None:
        code = ended.get("exit_code")
        info.exit_code = code
        if code == 0:
            info.state = "finished"
        elif stopped:
            info.state = "stopped"
            info.message = "stopped by `singa stop`" + (
                " --now" if (_read_json(folder / "stop.json") or {}).get("now") else ""
            )
        else:
            info.state = "failed"
            sig = ended.get("signal")
            info.message = f"killed by signal {sig}" if sig else _last_error(folder / "log")
    elif not runner_alive(record):
        info.state = "stopped" if stopped else "failed"
        info.message = (
            "its runner ended without an exit status: killed (kill -9), or the machine restarted"
        )
    return info


def find(job_id: str, root: Path | None = None) -> Path:
    """The folder of the job whose id starts with ``job_id`` (a unique prefix)."""
    root = root or jobs_dir()
    matches = sorted(p for p in root.glob(f"{job_id}*") if (p / "job.json").exists())
    if len(matches) == 1 and job_id:
        return matches[0]
    known = ", ".join(p.name for p in sorted(root.glob("*")) if (p / "job.json").exists())
    raise SingaError(
        f"no job {job_id!r}" if not matches else f"{job_id!r} names {len(matches)} jobs",
        where=str(root),
        help=f"give a job id from `singa jobs` (known: {known or 'none'})",
    )


def list_jobs(root: Path | None = None) -> list[JobInfo]:
    root = root or jobs_dir()
    infos = []
    for folder in root.glob("*"):
        if (folder / "job.json").exists():
            try:
                infos.append(job_info(folder))
            except SingaError:
                continue
    return sorted(infos, key=lambda i: i.record.submitted)


# -- following and stopping -------------------------------------------------------------------
def follow_log(folder: Path, *, follow: bool, poll: float = 0.2) -> Iterator[str]:
    """The log's lines; with ``follow`` also those written later, until the job ends."""
    with open(folder / "log", encoding="utf-8", errors="replace") as fh:
        while True:
            line = fh.readline()
            if line:
                yield line
                continue
            if not follow or job_info(folder).state != "running":
                rest = fh.read()
                if rest:
                    yield rest
                return
            time.sleep(poll)


def stop(job_id: str, *, now: bool = False, root: Path | None = None) -> JobInfo:
    """Stop a running job: SIGTERM, which checkpoints and ends it (exit 2 with the
    checkpoint), or with ``now`` SIGKILL to the training (no checkpoint)."""
    folder = find(job_id, root)
    info = job_info(folder)
    if info.state != "running":
        raise SingaError(
            f"job {info.record.id} is not running: it {info.state}",
            where=job_id,
            help="`singa jobs` shows each job's state",
        )
    _write_json(folder / "stop.json", {"time": time.time(), "now": now})
    sig = signal.SIGUSR1 if now else signal.SIGTERM  # the runner: SIGUSR1 = kill the training
    try:
        os.kill(info.record.runner_pid, sig)
    except ProcessLookupError:
        pass
    return info
