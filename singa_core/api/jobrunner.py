"""The runner of a submitted job (see :mod:`singa_core.api.jobs`):
``python -m singa_core.api.jobrunner JOBDIR``.

Started by ``singa submit`` in a session of its own. It records its pid and start time in
``job.json``, starts ``singa train`` with the job's arguments (output appended to the
job's log; ``SINGA_JOB_ID`` in its environment) and records the training's pid and start
time too. It ignores SIGHUP, passes the first SIGTERM or SIGINT on to the training (which
stops after its step with a checkpoint; a second would abort it, so it is not passed on),
kills it on SIGUSR1 (``singa stop --now``), and writes ``exit.json`` (exit status, or the
signal that ended it) when it ends.

The training is started with ``PR_SET_PDEATHSIG`` = SIGTERM: if the runner itself is
killed (``kill -9``), the kernel sends the training SIGTERM, and it stops after its step
with a checkpoint and releases its workspace, as after ``singa stop``; the console follows
it by its own pid until it has.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

PR_SET_PDEATHSIG = 1


def _die_with(parent: int):
    """A ``preexec_fn``: SIGTERM to the child when ``parent`` (the runner) dies."""
    libc = ctypes.CDLL(None, use_errno=True)

    def arm() -> None:
        signal.pthread_sigmask(signal.SIG_SETMASK, [])  # the runner blocks them meanwhile
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the runner died before the request took effect
            os.kill(os.getpid(), signal.SIGTERM)

    return arm


def main(folder: Path) -> int:
    from singa_core.api.jobs import JOB_ID_ENV, _write_json, process_start, read_record

    asked: list[int] = []  # signals that arrive before the training exists
    child: subprocess.Popen | None = None

    def forward(signum, frame):
        if signum != signal.SIGUSR1 and any(s != signal.SIGUSR1 for s in asked):
            return  # one stop is enough: a second SIGTERM would abort the checkpoint
        asked.append(signum)
        if child is None:
            return
        try:
            child.send_signal(signal.SIGKILL if signum == signal.SIGUSR1 else signum)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
        signal.signal(sig, forward)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # the terminal that submitted it may go

    record = read_record(folder)
    record.runner_pid = os.getpid()
    record.runner_start = process_start(os.getpid())
    _write_json(folder / "job.json", _fields(record))

    ended: dict = {}
    if asked:  # stopped before the training started: it never runs
        ended = {"time": time.time(), "exit_code": 128 + asked[0]}
    else:
        log = open(folder / "log", "ab", buffering=0)  # noqa: SIM115 - the child writes it
        stops = {signal.SIGTERM, signal.SIGINT, signal.SIGUSR1}
        signal.pthread_sigmask(signal.SIG_BLOCK, stops)  # none lost or doubled meanwhile
        started = subprocess.Popen(
            [sys.executable, "-m", "singa_core.commands.cli", "train", record.conf, *record.args],
            cwd=record.cwd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", JOB_ID_ENV: record.id},
            preexec_fn=_die_with(os.getpid()),  # noqa: PLW1509 - the runner has no threads
        )
        child = started
        for signum in asked:  # arrived before it started
            child.send_signal(signal.SIGKILL if signum == signal.SIGUSR1 else signum)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, stops)
        record.training_pid = child.pid
        record.training_start = process_start(child.pid)
        _write_json(folder / "job.json", _fields(record))
        code = child.wait()
        ended = {"time": time.time(), "exit_code": code if code >= 0 else None}
        if code < 0:
            ended["signal"] = -code
    _write_json(folder / "exit.json", ended)
    return 0


def _fields(record) -> dict:
    from dataclasses import asdict

    return asdict(record)


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
