"""The runner of a submitted job (see :mod:`singa_core.api.jobs`):
``python -m singa_core.api.jobrunner JOBDIR``.

Started by ``singa submit`` in a session of its own. It records its pid and start time in
``job.json``, starts ``singa train`` with the job's arguments (output appended to the
job's log), ignores SIGHUP, passes SIGTERM and SIGINT on to the training (which stops
after its step with a checkpoint), kills it on SIGUSR1 (``singa stop --now``), and writes
``exit.json`` (exit status, or the signal that ended it) when it ends.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def main(folder: Path) -> int:
    from singa_core.api.jobs import _write_json, process_start, read_record

    record = read_record(folder)
    record.runner_pid = os.getpid()
    record.runner_start = process_start(os.getpid())
    data = json.loads((folder / "job.json").read_text())
    data.update(runner_pid=record.runner_pid, runner_start=record.runner_start)
    _write_json(folder / "job.json", data)

    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # the terminal that submitted it may go
    log = open(folder / "log", "ab", buffering=0)  # noqa: SIM115 - the child writes it
    child = subprocess.Popen(
        [sys.executable, "-m", "singa_core.commands.cli", "train", record.conf, *record.args],
        cwd=record.cwd,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )

    def forward(signum, frame):
        try:
            child.send_signal(signal.SIGKILL if signum == signal.SIGUSR1 else signum)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
        signal.signal(sig, forward)
    while True:
        try:
            code = child.wait()
            break
        except InterruptedError:  # pragma: no cover - PEP 475 retries; kept for safety
            continue
    ended = {"time": time.time(), "exit_code": code if code >= 0 else None}
    if code < 0:
        ended["signal"] = -code
    _write_json(folder / "exit.json", ended)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
