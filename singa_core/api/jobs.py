"""Jobs that outlive the terminal: submit, list, follow and stop (SINGA 0.3's
``singa-run.sh`` and ``singa-console.sh list | view | kill``).

:func:`submit` starts ``singa train JOB.conf ARGS`` detached from the calling terminal: a
small runner process (``python -m singa_core.api.jobrunner JOBDIR``) in a session of its
own, with no controlling terminal, starts the training with its output going to the job's
log, ignores hang-ups, passes the first SIGTERM/SIGINT on, and records how the training
ended. The training gets SIGTERM when its runner dies (``PR_SET_PDEATHSIG``): a runner
killed with ``kill -9`` leaves no training behind, it stops after its step with a
checkpoint. Every job has a folder in the jobs directory (``$SINGA_JOBS_DIR``, default
``~/.singa/jobs``):

* ``job.json``: id, name, the job.conf and arguments, the engine asked for, the host and
  machine (boot id and pid namespace: where its pids mean something), workspace, the time
  it was submitted, the runner's and the training's pids and start times (so a reused pid
  is not taken for them);
* ``log``: everything the training printed;
* ``exit.json``: written by the runner when the training ends (exit status or signal);
* ``stop.json``: made by the first :func:`stop` before it signals (a hard link, so two
  stops at once cannot both signal; the state says "stopped").

The state (:func:`job_info`) is read from those files and the process table: running while
the runner or the training lives; finished (exit 0), stopped (a stop asked for), failed
with the exit status and the last ``error:`` line; a runner that died without writing
``exit.json`` (``kill -9``, the machine restarted) is failed, never running. A job of
another machine (a jobs folder shared over NFS) is shown with its host and its last known
state, unchecked. A record that cannot be read is **damaged**, listed with what is wrong.
Progress (the step reached of the job's total, the latest loss and accuracy) is the job's
own: the workspace's ``metrics.jsonl`` records after the ``start`` record that carries the
job's id (the runner gives the training ``SINGA_JOB_ID``), and the last step from its log.

Jobs on a cluster (``singa submit --engine ray --address HEAD``; ``singa jobs|logs|stop
--address``) go through the engine's console (``Engine.cluster_jobs``: the Ray engine's
supervisor actors and its registry in the GCS), so this module names no engine; this
machine keeps only a pointer to each job it submitted there (``cluster`` in job.json),
listed as unknown.
"""

from __future__ import annotations

import json
import os
import re
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
from singa_core.running.fileio import atomic_write_bytes, open_regular, read_regular_text

JOBS_DIR_ENV = "SINGA_JOBS_DIR"
JOB_ID_ENV = "SINGA_JOB_ID"  # given to the training: its metrics' start record names the job


def jobs_dir() -> Path:
    return Path(os.environ.get(JOBS_DIR_ENV) or Path.home() / ".singa" / "jobs")


def machine_id() -> str:
    """Where a pid means something: the kernel's boot id and this pid namespace."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = ""
    try:
        pidns = os.readlink("/proc/self/ns/pid")
    except OSError:
        pidns = ""
    return f"{boot}/{pidns}"


@dataclass
class JobRecord:
    """What ``job.json`` holds."""

    id: str
    name: str
    conf: str  # absolute path of the job.conf
    args: list[str]  # singa train's other arguments
    engine: str  # the engine asked for (--engine), "auto" when none
    host: str
    workspace: str
    submitted: float
    cwd: str
    runner_pid: int = 0
    runner_start: str = ""  # /proc/<pid>/stat's start time: the pid is this runner's
    machine: str = ""  # machine_id() of the submitting machine ("" in older records)
    training_pid: int = 0
    training_start: str = ""
    cluster: str = ""  # a job submitted to a cluster (its address): its registry is there


#: job.json's fields and the types they must have
_FIELD_TYPES = {
    "id": str, "name": str, "conf": str, "args": list, "engine": str, "host": str,
    "workspace": str, "submitted": (int, float), "cwd": str, "runner_pid": int,
    "runner_start": str, "machine": str, "training_pid": int, "training_start": str,
    "cluster": str,
}  # fmt: skip
_REQUIRED = ("id", "name", "conf", "args", "engine", "host", "workspace", "submitted", "cwd")


@dataclass
class JobInfo:
    """A job as ``singa jobs`` shows it."""

    record: JobRecord
    state: str  # running, finished, failed, stopped, damaged
    exit_code: int | None = None
    message: str = ""  # why it failed, or what is damaged
    step: int | None = None
    total: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    engine: str = ""  # the engine it ran with (from its log), "" before it says
    checked: bool = True  # False: another machine's job, shown as last recorded
    stopping: bool = False  # a stop was asked for and the job still runs

    def as_dict(self) -> dict:
        d = asdict(self.record)
        d.update(
            state=self.state, exit_code=self.exit_code, message=self.message, step=self.step,
            total=self.total, metrics=self.metrics, engine_used=self.engine,
            checked=self.checked, stopping=self.stopping,
        )  # fmt: skip
        return d


class DamagedRecord(SingaError):
    """A job folder whose job.json (or exit.json) cannot be read as a record."""


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


def _parsed_job(conf, args: list[str]):
    """``(cfg, workspace)`` of a job to submit: job.conf parsed with the ``-o`` overrides
    of ``args`` (its mistakes reported before anything starts) and the workspace it runs
    in (``--workspace``, else the job.conf's)."""
    from singa_core.jobconf.parse import load_job

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
    return cfg, workspace


def submit(conf: str | Path, args: list[str] = (), *, root: Path | None = None) -> JobRecord:
    """Start ``singa train CONF ARGS`` detached; returns its record once the runner runs.
    The job.conf is parsed first (with ``-o`` overrides), so its mistakes are reported here
    and not in a log."""
    args = list(args)
    cfg, workspace = _parsed_job(conf, args)
    job = cfg.job
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
        machine=machine_id(),
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
    """A JSON object from ``path``; None when it is missing or unreadable."""
    try:
        data = json.loads(read_regular_text(path, "job record"))
    except (OSError, ValueError, SingaError):  # a FIFO there too: refused, never waited on
        return None
    return data if isinstance(data, dict) else None


def _describe(value) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def read_record(folder: Path) -> JobRecord:
    """The job's ``job.json``; :class:`DamagedRecord` (what is wrong) when it is missing,
    not JSON, not an object, lacks a field or has one of the wrong type."""
    path = folder / "job.json"

    def damaged(what: str) -> DamagedRecord:
        return DamagedRecord(
            f"job {folder.name}'s record is damaged: {what}",
            where=str(path),
            help="the job cannot be followed or stopped through it; remove the folder "
            "once nothing of it runs",
        )

    try:
        text = read_regular_text(path, "job record")
    except FileNotFoundError:
        raise damaged("job.json is missing") from None
    except SingaError as exc:  # a FIFO, a folder, ...: refused without waiting
        raise damaged(f"job.json cannot be read ({exc.message})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise damaged(
            f"job.json cannot be read ({getattr(exc, 'strerror', None) or exc})"
        ) from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise damaged(f"job.json is not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict):
        raise damaged(f"job.json holds {_describe(data)}, not a job record (an object)")
    missing = [k for k in _REQUIRED if k not in data]
    if missing:
        raise damaged(f"job.json lacks {', '.join(missing)}")
    for key, kind in _FIELD_TYPES.items():
        if key in data and (
            not isinstance(data[key], kind) or isinstance(data[key], bool)  # True is an int
        ):
            raise damaged(f"job.json's {key} is {_describe(data[key])}, of the wrong type")
    if not all(isinstance(a, str) for a in data["args"]):
        raise damaged("job.json's args are not all strings")
    return JobRecord(**{k: data[k] for k in JobRecord.__dataclass_fields__ if k in data})


def read_exit(folder: Path) -> dict | None:
    """The runner's ``exit.json`` (``exit_code``: int or None, ``signal``: int), None when
    there is none; :class:`DamagedRecord` when it is there but cannot be read as one."""
    path = folder / "exit.json"
    if not path.exists():
        return None
    data = _read_json(path)
    ok = (
        data is not None
        and (data.get("exit_code") is None or type(data.get("exit_code")) is int)
        and (data.get("signal") is None or type(data.get("signal")) is int)
    )
    if not ok or (data.get("exit_code") is None and data.get("signal") is None):
        try:
            shown = _describe(json.loads(read_regular_text(path, "exit record")))
        except (OSError, ValueError, SingaError):
            shown = "text that is not JSON"
        raise DamagedRecord(
            f"job {folder.name}'s exit record is damaged: exit.json holds {shown}, not an "
            "exit status",
            where=str(path),
            help="the job has ended; its log (`singa logs ID`) says how",
        )
    return data


# -- the state of a job -----------------------------------------------------------------------
def _stat_fields(pid: int) -> list[str]:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return []
    return stat.rsplit(")", 1)[1].split()


def process_start(pid: int) -> str:
    """The start time of process ``pid`` (field 22 of /proc/<pid>/stat), "" if it is gone."""
    fields = _stat_fields(pid)
    return fields[19] if len(fields) > 19 else ""


def _alive(pid: int, start: str) -> bool:
    """Whether ``pid`` is the process that started at ``start`` and has not exited."""
    if not pid or not start:
        return False
    fields = _stat_fields(pid)
    return len(fields) > 19 and fields[19] == start and fields[0] != "Z"


def runner_alive(record: JobRecord) -> bool:
    return _alive(record.runner_pid, record.runner_start)


def training_alive(record: JobRecord) -> bool:
    return _alive(record.training_pid, record.training_start)


def is_local(record: JobRecord) -> bool:
    """Whether ``record``'s pids are this machine's (its boot and pid namespace): another
    machine's job (a jobs folder shared over NFS) is not judged by this /proc. A record of
    this host from an earlier boot is local: that machine restarted."""
    if not record.machine:  # an older record: its host name alone
        return record.host == socket.gethostname()
    here = machine_id()
    if record.machine == here:
        return True
    same_ns = record.machine.split("/", 1)[-1] == here.split("/", 1)[-1]
    return record.host == socket.gethostname() and same_ns  # restarted since


def _tail(log: Path, size: int = 65536) -> list[str]:
    try:
        with open_regular(log, "job log") as fh:
            fh.seek(max(0, fh.seek(0, 2) - size))
            return fh.read().decode(errors="replace").splitlines()
    except (OSError, SingaError):
        return []


def _last_error(log: Path) -> str:
    lines = _tail(log)
    for line in reversed(lines):
        if ": error: " in line or line.startswith("error: "):
            return line.strip()[:300]
    return lines[-1].strip()[:300] if lines else ""


_ENDED = re.compile(r"^(?:finished|interrupted|stopped) at step (\d+)")
_ENGINE = re.compile(r"^singa \S+ \| job .* \| engine (\S+) \|")


def _from_log(log: Path) -> tuple[int | None, str]:
    """(the step its run ended at, the engine it ran with) from the job's own log."""
    step, engine = None, ""
    try:
        with open_regular(log, "job log") as fh:
            head = fh.read(65536).decode(errors="replace").splitlines()
    except (OSError, SingaError):
        return None, ""
    for line in head:
        m = _ENGINE.match(line)
        if m:
            engine = m.group(1)
            break
    for line in reversed(_tail(log)):
        m = _ENDED.match(line)
        if m:
            step = int(m.group(1))
            break
    return step, engine


def _progress(workspace: Path, job_id: str) -> tuple[int | None, int | None, dict[str, float]]:
    """The job's own progress in its workspace's ``metrics.jsonl``: the records after the
    ``start`` record naming ``job_id`` up to the next run's ``start``."""
    path = workspace / "metrics.jsonl"
    step = total = None
    metrics: dict[str, float] = {}
    mine = False
    try:
        with open_regular(path, "metrics file") as fh:  # a FIFO: refused, not waited on
            for raw in fh:
                try:
                    rec = json.loads(raw)
                except ValueError:
                    continue  # a torn last line
                if not isinstance(rec, dict):
                    continue
                if rec.get("event") == "start":
                    if mine and rec.get("job") != job_id:
                        break  # a later run in the same workspace
                    mine = rec.get("job") == job_id
                    if mine:
                        total = _number(rec.get("train_steps"))
                        step = _number(rec.get("step"))
                elif not mine:
                    continue
                elif rec.get("phase") == "train":
                    step = _number(rec.get("step"), step)
                    metrics = {k: rec[k] for k in ("loss", "accuracy") if _is_num(rec.get(k))}
                elif rec.get("phase") == "test" and _is_num(rec.get("accuracy")):
                    metrics["test accuracy"] = rec["accuracy"]
    except (OSError, SingaError):
        pass
    return step, total, metrics


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _number(v, default=None):
    return int(v) if _is_num(v) else default


def _damaged_info(folder: Path, err: SingaError) -> JobInfo:
    try:
        submitted = folder.stat().st_mtime
    except OSError:
        submitted = 0.0
    record = JobRecord(id=folder.name, name="?", conf="", args=[], engine="", host="",
                       workspace="", submitted=submitted, cwd="")  # fmt: skip
    return JobInfo(record, "damaged", message=err.message)


def job_info(folder: Path) -> JobInfo:
    try:
        record = read_record(folder)
    except DamagedRecord as err:
        return _damaged_info(folder, err)
    if record.cluster:  # its registry is the cluster's
        return JobInfo(
            record, "unknown", checked=False,
            message=f"runs on the cluster at {record.cluster}: `singa jobs --address "
            f"{record.cluster}` shows it",
        )  # fmt: skip
    # Its processes are looked at before its files: the runner writes exit.json and then
    # ends, and the training writes its last log line before either. So a job that ends
    # while it is looked at is read as ended (its status, its last step) or as running,
    # never as killed without an exit status, nor ended with a step from before its end.
    local = is_local(record)
    restarted = bool(local and record.machine and record.machine != machine_id())
    runner = training = False
    if local and not restarted:
        runner, training = runner_alive(record), training_alive(record)
    step, total, metrics = _progress(Path(record.workspace), record.id)
    log = folder / "log"
    last_step, engine = _from_log(log)
    info = JobInfo(record, "running", step=step, total=total, metrics=metrics, engine=engine)
    try:
        ended = read_exit(folder)
    except DamagedRecord as err:
        info.state, info.message = "damaged", err.message
        return info
    stopped = (folder / "stop.json").exists()
    if ended is not None:
        info.step = last_step if last_step is not None else step
        code = ended.get("exit_code")
        info.exit_code = code
        if code == 0:
            info.state = "finished"
        elif stopped:
            info.state = "stopped"
            info.message = "stopped by `singa stop`" + (
                " --now" if (folder / "stop-now.json").exists() else ""
            )
        else:
            info.state = "failed"
            sig = ended.get("signal")
            info.message = f"killed by signal {sig}" if sig else _last_error(log)
        return info
    if not local:
        info.checked = False
        info.stopping = stopped
        info.message = (
            f"on {record.host or 'another machine'}: its last known state (its processes "
            "cannot be seen from this machine)"
        )
        return info
    if runner or training:  # restarted (local, another boot): neither was looked at
        info.stopping = stopped
        if not runner:
            info.message = (
                "its runner was killed; the training stops after its step with a checkpoint "
                f"(pid {record.training_pid})"
            )
        return info
    info.step = last_step if last_step is not None else step
    info.state = "stopped" if stopped else "failed"
    how = "its runner ended without an exit status: killed (kill -9), or the machine restarted"
    if restarted:
        how = f"{record.host} has restarted since it was submitted; it ended without an exit status"
    last = _last_error(log)
    info.message = how + (f"; its log ends: {last}" if last else "")
    return info


def _job_folders(root: Path) -> list[Path]:
    """The job folders of ``root``: those with a job.json, or with a log or exit record
    left without one (damaged)."""
    try:
        entries = sorted(root.iterdir())
    except OSError:
        return []
    found = []
    for p in entries:
        try:
            if p.is_dir() and any((p / n).exists() for n in ("job.json", "log", "exit.json")):
                found.append(p)
        except OSError:
            continue
    return found


def find(job_id: str, root: Path | None = None) -> Path:
    """The folder of the job whose id is ``job_id``, or starts with it (a unique prefix).
    Ids are literal names: no pattern, path or glob is interpreted."""
    root = root or jobs_dir()
    folders = {p.name: p for p in _job_folders(root)}
    if job_id in folders:
        return folders[job_id]
    matches = [n for n in folders if job_id and n.startswith(job_id)]
    if len(matches) == 1:
        return folders[matches[0]]
    known = ", ".join(folders) or "none"
    raise SingaError(
        f"no job {job_id!r}" if not matches else f"{job_id!r} names {len(matches)} jobs",
        where=str(root),
        help=f"give a job id from `singa jobs` (known: {known})",
    )


def list_jobs(root: Path | None = None) -> list[JobInfo]:
    root = root or jobs_dir()
    infos = [job_info(folder) for folder in _job_folders(root)]
    return sorted(infos, key=lambda i: (i.record.submitted, i.record.id))


# -- jobs on a cluster -----------------------------------------------------------------------
def cluster_engine(engine: str | None = None):
    """The engine class whose cluster console serves: ``engine`` (a name) when given, else
    the first installed engine that has one; None when there is none."""
    from singa_core.contracts.engine import Engine
    from singa_core.plugin_host import get_host

    host = get_host()
    names = [engine] if engine else host.registry("engine").names()
    for name in names:
        try:
            cls = host.get("engine", name)
        except SingaError:
            if engine:
                raise
            continue
        if getattr(cls.cluster_jobs, "__func__", None) is not Engine.cluster_jobs.__func__:
            return cls
    return None


def cluster_address(address: str | None, engine: str | None = None) -> tuple[object, str] | None:
    """(the engine class, the cluster's address) when ``address`` (``--address``) or the
    engine's own default (Ray: RAY_ADDRESS) names a cluster; None for this machine's jobs."""
    if address == "local":
        return None
    cls = cluster_engine(engine)
    if cls is None:
        if address:
            raise SingaError(
                "no installed engine runs jobs on a cluster",
                where="--address",
                help="install one: pip install 'singa-classic[ray]'",
            )
        return None
    address = address or cls.default_address()
    return (cls, address) if address else None


def submit_to_cluster(cls, address: str, conf, args: list[str], insecure: bool,
                      root: Path | None = None) -> dict:  # fmt: skip
    """Submit ``singa train CONF ARGS`` to the cluster at ``address`` (its supervisor on
    the head; the job's paths are the head's); a pointer to it is kept in this machine's
    jobs folder. The job.conf is parsed here first: its mistakes are reported here."""
    args = list(args)
    cfg, workspace = _parsed_job(conf, args)
    job = cfg.job
    cwd = os.getcwd()
    conf_path = str(Path(conf).absolute())
    name = job.name or Path(conf).stem
    with cls.cluster_jobs(address, insecure) as console:
        rec = console.submit(conf_path, args, name=name, workspace=workspace, cwd=cwd)
    root = root or jobs_dir()
    try:
        (root / rec["id"]).mkdir(parents=True, exist_ok=True)
        pointer = JobRecord(
            id=rec["id"], name=name, conf=conf_path, args=args, engine="ray",
            host=socket.gethostname(), workspace=workspace, submitted=rec["submitted"],
            cwd=cwd, machine=machine_id(), cluster=address,
        )  # fmt: skip
        _write_json(root / rec["id"] / "job.json", asdict(pointer))
    except OSError:
        pass  # the registry is the cluster's; this is only a pointer
    return rec


def cluster_pointers(address: str, root: Path | None = None) -> list[JobInfo]:
    """The jobs this machine submitted to the cluster at ``address`` (its pointers)."""
    return [i for i in list_jobs(root) if i.record.cluster == address]


# -- following and stopping -------------------------------------------------------------------
def follow_log(folder: Path, *, follow: bool, poll: float = 0.2) -> Iterator[str]:
    """The log's lines; with ``follow`` also those written later, until the job ends."""
    path = folder / "log"
    try:
        fh = open(path, encoding="utf-8", errors="replace")  # noqa: SIM115
    except OSError as exc:
        raise SingaError(
            f"job {folder.name}'s log cannot be read: {exc.strerror or exc}",
            where=str(path),
            help="the job's output went there; `singa jobs` shows its state",
        ) from None
    with fh:
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


def _claim(path: Path, data: dict) -> bool:
    """Create ``path`` with ``data`` unless it exists; True for the one caller that made
    it (a hard link of a complete temporary file: atomic, and exclusive)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(3)}")
    atomic_write_bytes(tmp, json.dumps(data).encode(), "stop record")
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)


@dataclass
class StopResult:
    info: JobInfo
    sent: bool  # False: a stop was already under way, nothing more was sent


def stop(job_id: str, *, now: bool = False, root: Path | None = None) -> StopResult:
    """Stop a running job: SIGTERM, which checkpoints and ends it (exit 143 with the
    checkpoint), or with ``now`` SIGKILL to the training (no checkpoint). A second stop
    while one is under way sends nothing (``sent`` False); ``now`` still kills."""
    folder = find(job_id, root)
    info = job_info(folder)
    rec = info.record
    if info.state == "damaged":
        raise SingaError(
            f"job {rec.id} cannot be stopped: {info.message}",
            where=str(folder),
            help="stop its training by its pid if it still runs (see its log)",
        )
    if info.state != "running":
        raise SingaError(
            f"job {rec.id} is not running: it {info.state}",
            where=job_id,
            help="`singa jobs` shows each job's state",
        )
    if not info.checked:
        raise SingaError(
            f"job {rec.id} runs on {rec.host}, whose processes this machine cannot signal",
            where=job_id,
            help=f"run `singa stop {rec.id}` on {rec.host}",
        )
    first = _claim(folder / "stop.json", {"time": time.time(), "now": now})
    if now:
        _claim(folder / "stop-now.json", {"time": time.time()})
    elif not first:
        return StopResult(info, sent=False)
    if runner_alive(rec):  # the runner passes SIGTERM on, SIGUSR1 = kill the training
        pid, sig = rec.runner_pid, (signal.SIGUSR1 if now else signal.SIGTERM)
    else:  # the runner was killed: the training itself
        pid, sig = rec.training_pid, (signal.SIGKILL if now else signal.SIGTERM)
        if not training_alive(rec):
            return StopResult(info, sent=False)
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
    return StopResult(info, sent=True)
