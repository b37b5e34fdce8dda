"""A trial as a process: ``singa train`` of the study's job.conf with the trial's ``-o``
values, in the trial's own workspace, with its share of the CPUs.

:class:`TrialProcess` runs one on this machine and reads its test passes from its
``metrics.jsonl`` as they land. The process runs in a process group of its own (a Ctrl-C
at the terminal reaches the tuner alone, which stops every trial with one SIGTERM: each
writes a checkpoint and exits 143) and gets SIGTERM when the tuner dies, however it dies
(``PR_SET_PDEATHSIG``): a ``kill -9`` of the tuner leaves no trial training on, and each
leaves a checkpoint that ``--resume`` continues from. :class:`LocalTrials` is the embedded
runner; an engine may run trials elsewhere (``Engine.trial_runner``: Ray places each on a
node with its CPUs free) with the same :class:`TrialLaunch` and the same handle methods.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

PR_SET_PDEATHSIG = 1
#: the thread-count variables a trial's BLAS and OpenMP runtimes read
THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


@dataclass
class TrialLaunch:
    """Everything needed to start (or continue) one trial, in plain values (it travels to
    another node as it is)."""

    number: int
    conf: str  # the study's copy of job.conf
    overrides: list[str]
    workspace: str
    seed: int
    threads: int
    cwd: str
    resume: bool = False
    env: dict = field(default_factory=dict)

    def argv(self) -> list[str]:
        args = [sys.executable, "-m", "singa_core.commands.cli", "train", self.conf,
                "--workspace", self.workspace, "--seed", str(self.seed), "-q",
                "--no-tensorboard"]  # fmt: skip
        for o in self.overrides:
            args += ["-o", o]
        if self.resume:
            args.append("--resume")
        return args

    def as_dict(self) -> dict:
        return asdict(self)


def _arm(parent: int):
    """A ``preexec_fn``: a process group of its own, and SIGTERM when ``parent`` dies."""
    libc = ctypes.CDLL(None, use_errno=True)

    def arm() -> None:
        os.setpgid(0, 0)
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the tuner died before the request took effect
            os.kill(os.getpid(), signal.SIGTERM)

    return arm


class MetricsTail:
    """The records appended to a workspace's metrics.jsonl since the last read (complete
    lines only). A file rewritten under it (a resumed run rewinds it) is read again from
    its start; the reader skips steps it has seen."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.offset = 0
        self.inode = None

    def read(self) -> list[dict]:
        try:
            st = os.stat(self.path)
        except OSError:
            return []
        if st.st_ino != self.inode or st.st_size < self.offset:
            self.inode, self.offset = st.st_ino, 0
        if st.st_size == self.offset:
            return []
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read(st.st_size - self.offset)
        except OSError:
            return []
        end = data.rfind(b"\n") + 1
        self.offset += end
        out = []
        for line in data[:end].splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict):
                out.append(rec)
        return out


def failure_reason(log: Path, code: int | None) -> str:
    """Why a trial failed: the last ``error:`` line of its log (and its ``help:``), else
    how it ended."""
    try:
        lines = Path(log).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        lines = []
    for i in range(len(lines) - 1, -1, -1):
        if "error:" in lines[i]:
            said = lines[i].strip()
            helps = [x.strip() for x in lines[i + 1 :] if x.startswith("help:")][:1]
            return " ".join([said, *helps])[:600]
    if code is not None and code < 0:
        return f"killed by signal {-code}"
    tail = " | ".join(x.strip() for x in lines[-3:] if x.strip())
    return f"exit {code}" + (f": {tail[:400]}" if tail else "")


class TrialProcess:
    """One trial running on this machine (see the module docstring)."""

    def __init__(self, launch: TrialLaunch) -> None:
        self.launch = launch
        ws = Path(launch.workspace)
        ws.mkdir(parents=True, exist_ok=True)
        self.log_path = ws / "trial.log"
        env = dict(os.environ)
        env.pop("SINGA_JOB_ID", None)
        for name in THREAD_VARS:
            env[name] = str(launch.threads)
        env.update(launch.env)
        env["SINGA_TUNE_TRIAL"] = str(launch.number)
        env["PYTHONUNBUFFERED"] = "1"
        with open(self.log_path, "ab") as log:
            log.write(f"$ {' '.join(launch.argv()[3:])}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(  # noqa: S603 - our own interpreter and command
                launch.argv(), cwd=launch.cwd, env=env, stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, preexec_fn=_arm(os.getpid()),
            )  # fmt: skip
        self.tail = MetricsTail(ws / "metrics.jsonl")
        self.node = socket.gethostname()
        self.stopped = False

    def records(self) -> list[dict]:
        return self.tail.read()

    def poll(self) -> int | None:
        return self.proc.poll()

    def stop(self) -> None:
        """SIGTERM once: the trial stops after its step with a checkpoint (exit 143)."""
        if not self.stopped and self.proc.poll() is None:
            self.stopped = True
            try:
                self.proc.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.proc.kill()

    def wait(self, timeout: float | None = None) -> int | None:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def reason(self, code: int | None) -> str:
        return failure_reason(self.log_path, code)

    def close(self) -> None:
        """The trial has ended (nothing to free on this machine)."""


class LocalTrials:
    """The embedded runner: trials as processes on this machine."""

    where = "this machine"

    def __init__(self, cpus: int) -> None:
        self.cpus = max(1, int(cpus))

    def __enter__(self) -> LocalTrials:
        return self

    def __exit__(self, *exc) -> None:
        pass

    def slots(self) -> int:
        """How many trials fit at once (a CPU each)."""
        return self.cpus

    def start(self, launch: TrialLaunch) -> TrialProcess:
        return TrialProcess(launch)


def runner_for(engine: str | None, address: str | None = None, insecure: bool = False):
    """Where a study's trials run: this machine (no engine named), or the cluster of the
    engine named (``Engine.trial_runner``; Ray: ``--engine ray --address HEAD``)."""
    from singa_core.contracts.errors import SingaError
    from singa_core.contracts.resources import usable_cpus

    if not engine:
        if address:
            raise SingaError(
                "--address names a cluster, and no engine runs the trials there",
                where="--address",
                help="add --engine ray (trials on the Ray cluster), or leave --address out "
                "(trials on this machine)",
            )
        return LocalTrials(usable_cpus())
    from singa_core.plugin_host.host import get_host

    cls = get_host().get("engine", engine)
    runner = cls.trial_runner(address, insecure)
    if runner is None:
        raise SingaError(
            f"engine '{engine}' cannot run a study's trials",
            where="--engine",
            help="leave --engine out (each trial a process on this machine), or use an "
            "engine that places trials on a cluster: --engine ray --address HEAD:PORT",
        )
    return runner
