"""The runner of one job submitted to a Ray cluster (``python -m
singa_builtins.engines.ray.jobrunner SPEC.json``), started on the head by the job's
supervisor actor (:mod:`.clusterjobs`).

It runs in a session of its own (``setsid``), outside the supervisor's process group, and
not as the supervisor's child (it forks once more and the first process exits): when a Ray
worker process dies, its raylet kills the worker's whole process group (SIGTERM, then
SIGKILL 0.2 s later: measured, Ray 2.60), which left the training 0.2 s to save a checkpoint
that takes longer (a Ray call to every server); and a worker that exits because its raylet
died kills its own child processes (measured: the runner, when it was one). So the runner,
and the training below it, outlive the supervisor, and the runner:

* starts ``singa train JOB.conf ARGS --address <the GCS>`` with its output in the job's
  log on the head (the training gets SIGTERM if the runner itself dies: it checkpoints);
* every :data:`TICK` s: passes a stop asked in the registry (``stop:<id>``) on to the
  training (SIGTERM: it checkpoints; ``--now``: SIGKILL), and watches its supervisor: when
  that is gone, it stops the training with SIGTERM (a checkpoint of the last step) and
  names why: "its supervisor was killed" while the head's raylet runs, "the head's raylet
  died" when that is gone too;
* every :data:`PROGRESS_EVERY` s: copies the new lines of the log into the registry
  (:class:`~.registry.LogShipper`) and writes the record with the step, the total and the
  latest metrics (from the workspace's ``metrics.jsonl`` and the log, whichever is newer);
* at the end: the rest of the log, and the record of how the job ended: finished, stopped
  (``singa stop``), or failed with the reason, the true last step and the checkpoint the
  training wrote at its stop, or the newest one when it could not write one.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from singa_builtins.engines.ray.registry import LogShipper, Registry

TICK = 0.5  # seconds between looks at stops and the supervisor
PROGRESS_EVERY = 2.0  # seconds between the record's progress updates
FINAL_TRIES = 60.0  # seconds the final record is retried while the GCS does not answer

_TRAIN = re.compile(r"^Train step-(\d+), (.*)$")
_METRIC = re.compile(r"(loss|accuracy) = ([-+0-9.eE]+|nan|inf)")
_WRITTEN = re.compile(r"checkpoint (\S+) written")


def started(pid: int) -> str:
    """``pid``'s start time (/proc), "" when it is gone or a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return ""
    return "" if fields[0] in ("Z", "X") else fields[19]


def alive(pid: int, start: str) -> bool:
    return bool(pid) and bool(start) and started(pid) == start


def log_progress(log: Path) -> tuple[int | None, dict[str, float]]:
    """(the newest ``Train step-N`` of the log, its loss and accuracy)."""
    from singa_core.api.jobs import _tail

    for line in reversed(_tail(log)):
        m = _TRAIN.match(line.strip())
        if m:
            metrics = {k: float(v) for k, v in _METRIC.findall(m.group(2))}
            return int(m.group(1)), metrics
    return None, {}


def _die_with(parent: int):
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)

    def arm() -> None:
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGTERM)

    return arm


class Runner:
    def __init__(self, spec: dict) -> None:
        self.rec = dict(spec["record"])
        self.train_args = list(spec["train_args"])
        self.registry = Registry(spec["gcs"])
        self.supervisor = tuple(spec["supervisor"])  # (pid, start time)
        self.raylet = tuple(spec["raylet"])
        self.log_path = Path(spec["log"])
        self.workspace = Path(self.rec["cwd"]) / self.rec["workspace"]
        self.shipper = LogShipper(self.registry, self.rec["id"], self.log_path)
        self.stop_seen: dict | None = None
        self.lost: str | None = None  # why the training was stopped for its supervisor

    def note(self, text: str) -> None:
        with open(self.log_path, "ab") as fh:
            fh.write(f"singa: {text}\n".encode())

    def put(self) -> bool:
        try:
            self.registry.put_record(self.rec)
            return True
        except Exception:  # noqa: BLE001 - the GCS is gone for a moment: the next tick
            return False

    def progress(self) -> None:
        from singa_core.api.jobs import _from_log, _progress

        step, total, metrics = _progress(self.workspace, self.rec["id"])
        logged, logged_metrics = log_progress(self.log_path)
        if logged is not None and (step is None or logged > step):
            step, metrics = logged, {**metrics, **logged_metrics}
        _, engine = _from_log(self.log_path)
        self.rec.update(step=step, total=total, metrics=metrics, engine=engine or "ray",
                        beat=time.time())  # fmt: skip
        if self.shipper.ship():
            self.rec.update(log_size=self.shipper.size, log_start=self.shipper.start)

    def run(self) -> int:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "SINGA_JOB_ID": self.rec["id"]}
        env.pop("RAY_ADDRESS", None)  # the job names its cluster itself (--address)
        with open(self.log_path, "ab", buffering=0) as log:
            self.child = subprocess.Popen(
                [sys.executable, "-m", "singa_core.commands.cli", "train", *self.train_args],
                cwd=self.rec["cwd"], stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, env=env,
                preexec_fn=_die_with(os.getpid()),  # noqa: PLW1509 - no thread here yet
            )  # fmt: skip
        self.rec.update(state="running", pid=self.child.pid, runner_pid=os.getpid(),
                        started=time.time(), log_size=0, log_start=0)  # fmt: skip
        self.put()
        next_progress = time.monotonic() + PROGRESS_EVERY
        while True:
            try:
                code = self.child.wait(timeout=TICK)
                break
            except subprocess.TimeoutExpired:
                pass
            self.watch_supervisor()
            self.pass_stops()
            if time.monotonic() >= next_progress:
                next_progress = time.monotonic() + PROGRESS_EVERY
                self.progress()
                self.put()
        self.finish(code)
        return 0

    def watch_supervisor(self) -> None:
        if self.lost is not None or alive(*self.supervisor):
            return
        if alive(*self.raylet):
            self.lost = "its supervisor was killed"
        else:
            self.lost = "the head's raylet died"
        self.note(f"{self.lost} (the job's supervisor on the head is gone): stopping the "
                  "training after this step, with a checkpoint")  # fmt: skip
        self.rec["stopping"] = True
        self.signal(signal.SIGTERM)
        self.put()

    def pass_stops(self) -> None:
        try:
            asked = self.registry.stop_asked(self.rec["id"])
        except Exception:  # noqa: BLE001 - the GCS is gone for a moment
            return
        if asked is None:
            return
        now = bool(asked.get("now"))
        if self.stop_seen is not None and (not now or self.stop_seen.get("now")):
            return
        self.stop_seen = asked
        self.rec["stopping"] = True
        self.rec["stop_now"] = now
        self.signal(signal.SIGKILL if now else signal.SIGTERM)
        self.put()

    def signal(self, sig: int) -> None:
        try:
            self.child.send_signal(sig)
        except ProcessLookupError:
            pass

    def finish(self, code: int) -> None:
        from singa_core.api.jobs import _from_log, _last_error, _tail
        from singa_core.running.checkpoint import latest_checkpoint

        self.progress()
        last, _ = _from_log(self.log_path)
        if last is not None:
            self.rec["step"] = last
        self.rec["exit_code"] = code if code >= 0 else None
        self.rec["ended"] = time.time()
        self.rec["stopping"] = False
        if code == 0:
            self.rec["state"] = "finished"
        elif self.stop_seen is not None and self.lost is None:
            self.rec["state"] = "stopped"
            self.rec["message"] = "stopped by `singa stop`" + (
                " --now" if self.rec.get("stop_now") else ""
            )
        else:
            self.rec["state"] = "failed"
            written = None
            for line in reversed(_tail(self.log_path)):
                m = _WRITTEN.search(line)
                if m:
                    written = m.group(1)
                    break
            if written and last is not None:
                saved = f"the training stopped at step {last} with a checkpoint ({written})"
            else:
                newest = latest_checkpoint(self.workspace)
                saved = (
                    f"it could not checkpoint at its stop; the newest checkpoint is "
                    f"{newest[1][0]} (step {newest[0]})"
                    if newest
                    else "it could not checkpoint at its stop and wrote no checkpoint before"
                )
            if self.lost is not None:
                self.rec["message"] = f"{self.lost}; {saved}"
            else:
                why = f"killed by signal {-code}" if code < 0 else _last_error(self.log_path)
                self.rec["message"] = why if (written or code < 0) else f"{why}; {saved}"
            self.rec["checkpoint"] = written or ""
        deadline = time.monotonic() + FINAL_TRIES
        while True:  # the rest of the log, then the end: a follower sees the whole log
            shipped = self.shipper.ship()
            if shipped:
                self.rec.update(log_size=self.shipper.size, log_start=self.shipper.start)
            if shipped and self.put():
                return
            if time.monotonic() > deadline:
                self.note("could not record the job's end in the cluster's registry")
                return
            time.sleep(1.0)


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    # not a child of the supervisor's worker process: a Ray worker that exits (its raylet
    # died, say) kills its child processes (RAY_kill_child_processes_on_worker_exit), but
    # not their children
    if os.fork():
        os._exit(0)
    return Runner(spec).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
