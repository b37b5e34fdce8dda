"""What a running job shows: SINGA-style lines, a live progress line, metrics.jsonl.

Lines on stdout look like SINGA's (``Train step-10, loss = 2.2, accuracy = 0.2``). When
stderr is a terminal a progress line (step, ms/step, ETA, last loss) is redrawn there in
place; otherwise, when nothing was printed for :data:`HEARTBEAT_SECONDS`, a plain line
``progress: step 120/1000 (training), 55.1 ms/step, ETA 48s`` goes to stderr, so a slow
phase in a log file never looks hung. Every metrics line is also appended as
JSON to ``WORKSPACE/metrics.jsonl``.

metrics.jsonl is strict JSON, one object a line: ``{"phase", "step", "time", metric: value
...}`` records and ``{"event": ...}`` records (``start`` of every run, ``non_finite`` when a
NaN stopped training). A non-finite metric is written as ``null`` and named, with its value,
in the record's ``"non_finite"`` object (e.g. ``{"loss": null, "non_finite": {"loss":
"nan"}}``). A resumed run first drops the records the interrupted run logged after its
checkpoint (:func:`rewind_metrics`), so the file reads as if the run had never stopped;
every run first cuts a torn last line (no newline: a full disk or a kill mid-write) that
the next append would otherwise glue to its first record (:func:`cut_torn_line`).

A failed write of metrics.jsonl or of the TensorBoard event file ends the run (exit 2 naming
the file and the free space of its own filesystem; the checkpoints written so far are
intact); neither is ever written by a background thread, so a stop request is always seen.
"""

from __future__ import annotations

import json
import math
import os
import sys
import threading
import time
from pathlib import Path

from singa_core.running.fileio import atomic_write_bytes, output_target

#: seconds without output after which a run without a terminal prints a progress line
HEARTBEAT_SECONDS = 30.0


def json_record(rec: dict) -> str:
    """``rec`` as one line of strict JSON: non-finite floats become null and are listed,
    with their value, under ``"non_finite"``."""
    bad = {k: str(v) for k, v in rec.items() if isinstance(v, float) and not math.isfinite(v)}
    if bad:
        rec = {k: (None if k in bad else v) for k, v in rec.items()}
        rec["non_finite"] = bad
    return json.dumps(rec, allow_nan=False)


def rewind_metrics(path: Path, step: int, evaluated=()) -> int:
    """Prepare ``path`` (metrics.jsonl) for a run resumed from checkpoint ``step``: in the
    records of the current run (after its last non-resumed ``start`` event), drop the metric
    records logged after that checkpoint was written: training at ``step`` or later,
    evaluations after ``step``, and evaluations at ``step`` not in ``evaluated`` (those the
    checkpoint says had run). Partial lines of a killed run go too. Returns the number of
    lines dropped."""
    from singa_core.running.fileio import read_regular_text

    try:  # a FIFO in its place is refused at once, never waited on
        lines = read_regular_text(path, "metrics file").splitlines()
    except FileNotFoundError:
        return 0
    recs = []
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            rec = None
        recs.append(rec if isinstance(rec, dict) else None)
    begin = 0
    for i, rec in enumerate(recs):
        if rec and rec.get("event") == "start" and not rec.get("resumed"):
            begin = i
    kept = lines[:begin]
    for line, rec in zip(lines[begin:], recs[begin:], strict=True):
        if rec is None:
            continue
        s, phase = rec.get("step"), rec.get("phase")
        if phase is not None and isinstance(s, int):
            if phase == "train" and s >= step:
                continue
            if phase != "train" and (s > step or (s == step and phase not in evaluated)):
                continue
        kept.append(line)
    if len(kept) != len(lines):
        atomic_write_bytes(path, "".join(x + "\n" for x in kept).encode(), "metrics file")
    return len(lines) - len(kept)


def cut_torn_line(path: Path) -> int:
    """Cut a last line without its newline from ``path`` (metrics.jsonl): a record torn by
    a full disk or a kill, which the next append would glue to the run's first record.
    Returns the number of bytes cut (0 when the file ends in a newline or is absent)."""
    from singa_core.running.fileio import open_regular

    try:
        with open_regular(path, "metrics file") as fh:  # a FIFO: refused, not waited on
            size = fh.seek(0, 2)
            if size == 0:
                return 0
            fh.seek(size - 1)
            if fh.read(1) == b"\n":
                return 0
            keep, pos = 0, size
            while pos > 0:  # the last newline, read backwards in blocks
                step = min(pos, 1 << 16)
                pos -= step
                fh.seek(pos)
                at = fh.read(step).rfind(b"\n")
                if at >= 0:
                    keep = pos + at + 1
                    break
    except FileNotFoundError:
        return 0
    with open(path, "r+b") as fh:
        fh.truncate(keep)
        fh.flush()
        os.fsync(fh.fileno())
    return size - keep


def write_failure(path, exc: OSError, what: str = "metrics file"):
    """The SingaError (exit 2) of a failed write to a run's log file ``path``: the file,
    the OS's reason, the free space of its filesystem (of ``path`` itself when it is a
    folder, else of its folder); the checkpoints are untouched."""
    import shutil

    from singa_core.contracts.errors import SingaError
    from singa_core.contracts.memory import format_bytes

    folder = Path(path) if Path(path).is_dir() else Path(path).parent
    try:
        free = f"{format_bytes(shutil.disk_usage(folder).free)} free on its filesystem"
    except OSError:
        free = "the free space of its filesystem is unknown"
    return SingaError(
        f"cannot write {what} {path}: {exc.strerror or exc} ({free})",
        where=str(path),
        notes=["the checkpoints written so far are intact (each is written atomically)"],
        help="free some disk space (or fix the folder's permissions), then continue with "
        "`singa train --resume`",
    )


def stop_note() -> str:
    """What a first Ctrl-C/SIGTERM prints: how to stop at once. A submitted job
    (``SINGA_JOB_ID``) has no terminal to press Ctrl-C in, so it names `singa stop`."""
    job = os.environ.get("SINGA_JOB_ID")
    how = f"`singa stop {job} --now`" if job else "Ctrl-C again"
    return f"stopping after this step ({how} to abort now)"


def format_metrics(metrics: dict[str, float]) -> str:
    """``loss = 0.316456, accuracy = 0.930000, ...``. Beside a non-finite loss the other
    metrics of the same outputs (accuracy, ...) read ``n/a``: computed from NaN outputs they
    mean nothing (an argmax of NaNs gave ``accuracy = 1.000000``); ``lr`` stays."""
    loss = metrics.get("loss")
    diverged = isinstance(loss, float) and not math.isfinite(loss)
    parts = []
    for k, v in metrics.items():
        if diverged and k not in ("loss", "lr"):
            parts.append(f"{k} = n/a")
        elif isinstance(v, float) and (abs(v) >= 1e-3 or v == 0) and math.isfinite(v):
            parts.append(f"{k} = {v:.6f}")
        else:
            parts.append(f"{k} = {v:.6g}")
    return ", ".join(parts)


class Reporter:
    def __init__(
        self,
        out=None,
        err=None,
        metrics_path: Path | None = None,
        live: bool | None = None,
        quiet: bool = False,
        tensorboard=None,
        heartbeat_seconds: float = HEARTBEAT_SECONDS,
    ) -> None:
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.live = self.err.isatty() if live is None else live
        self.quiet = quiet
        self.metrics_path = metrics_path
        self._metrics_file = None
        self._total = 0
        self._start_step = 0
        self._t_start = 0.0
        self._last_draw = 0.0
        self._step_times: list[float] = []
        self._last_loss: float | None = None
        self._progress_shown = False
        # where the run's wall time went (seconds): every training step, every evaluation
        # pass (validation/test), every checkpoint
        self.train_seconds = 0.0
        self.train_steps_timed = 0
        self.evaluation_seconds = 0.0
        self.checkpoint_seconds = 0.0
        # a singa_core.running.tensorboard.TensorBoardLog (or None): gets every metrics line and
        # step time; with param_histograms on, the loop hands it Param histograms
        self.tensorboard = tensorboard
        # without a terminal (a log file, a scheduler), a plain progress line on stderr when
        # nothing was printed for this long, so a slow phase never looks hung
        self.heartbeat_seconds = heartbeat_seconds
        self._heartbeat: threading.Thread | None = None
        self._heartbeat_stop = threading.Event()
        self._last_output = time.monotonic()
        self._activity = "starting"
        self._steps_done = 0
        # reentrant: a signal handler (Ctrl-C, SIGTERM) may print while the main thread is
        # printing, in the same thread
        self._print_lock = threading.RLock()

    @property
    def param_histograms(self) -> bool:
        return self.tensorboard is not None and self.tensorboard.histograms_enabled

    def histograms(self, step: int, hists: dict) -> None:
        """Param/gradient histograms (``running.tensorboard.param_histograms``) at ``step``."""
        if self.tensorboard is not None:
            self._board("histograms", step, hists)

    # -- lifecycle ---------------------------------------------------------------------
    def start(self, start_step: int, total: int, **info) -> None:
        self._start_step = start_step
        self._total = total
        self._t_start = time.perf_counter()
        if self.tensorboard is not None:
            self._board("start", start_step)
        if self.metrics_path is not None:
            try:
                self.metrics_path.parent.mkdir(parents=True, exist_ok=True)
                output_target(self.metrics_path, "metrics file")  # a regular file (or none)
                torn = cut_torn_line(self.metrics_path)
                self._metrics_file = open(self.metrics_path, "a", encoding="utf-8")  # noqa: SIM115
            except OSError as exc:
                raise write_failure(self.metrics_path, exc) from None
            if torn:
                self.note(
                    f"note: cut a torn last line ({torn} bytes) from {self.metrics_path}, "
                    "left by a run that stopped while writing it"
                )
            rec = {
                "event": "start",
                "step": start_step,
                "train_steps": total,
                "time": round(time.time(), 3),
                **info,
            }
            if os.environ.get("SINGA_JOB_ID"):  # a submitted job: its progress is its own
                rec["job"] = os.environ["SINGA_JOB_ID"]
            self._append(rec)
        self._steps_done = start_step
        self._last_output = time.monotonic()
        if not self.live and not self.quiet and self.heartbeat_seconds > 0:
            self._heartbeat_stop.clear()
            self._heartbeat = threading.Thread(
                target=self._beat, name="singa-progress", daemon=True
            )
            self._heartbeat.start()

    def begin(self, activity: str) -> None:
        """The loop is now ``activity`` ("training", "test", "validation", "checkpoint"):
        what a progress line names while nothing else is printed."""
        self._activity = activity

    def _beat(self) -> None:
        tick = min(1.0, self.heartbeat_seconds / 4)
        while not self._heartbeat_stop.wait(tick):
            if time.monotonic() - self._last_output < self.heartbeat_seconds:
                continue
            self.note(self.progress_text())

    def progress_text(self) -> str:
        """``progress: step 120/1000 (training), 55.1 ms/step, ETA 48s``."""
        text = f"progress: step {self._steps_done}/{self._total} ({self._activity})"
        if self._step_times:
            eta = self._seconds_left(self._steps_done, time.perf_counter())
            text += f", {self.mean_step_ms:.1f} ms/step, ETA {_fmt_seconds(eta)}"
        return text

    def _seconds_left(self, done: int, now: float) -> float:
        """The time the remaining steps take at this run's pace so far."""
        rate = (now - self._t_start) / max(done - self._start_step, 1)
        return rate * max(self._total - done, 0)

    def event(self, name: str, **fields) -> None:
        """Append an ``{"event": name, ...}`` record to metrics.jsonl."""
        if self.metrics_path is None:
            return
        rec = {"event": name, **fields, "time": round(time.time(), 3)}
        if self._metrics_file is not None:
            self._append(rec)
            return
        try:
            self.metrics_path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.metrics_path, "a", encoding="utf-8") as fh:
                fh.write(json_record(rec) + "\n")
        except OSError as exc:
            raise write_failure(self.metrics_path, exc) from None

    def _append(self, rec: dict) -> None:
        """One record to the open metrics.jsonl; a failed write (a full disk) is a
        SingaError naming the file and the free space, and the file is given up."""
        try:
            self._metrics_file.write(json_record(rec) + "\n")
            self._metrics_file.flush()
        except OSError as exc:
            fh, self._metrics_file = self._metrics_file, None
            _close_quietly(fh)
            raise write_failure(self.metrics_path, exc) from None

    def finish(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat_stop.set()
            self._heartbeat.join()
            self._heartbeat = None
        self._clear_progress()
        failed = None
        if self.tensorboard is not None:
            board, self.tensorboard = self.tensorboard, None
            path = board.path
            try:
                board.close()
            except OSError as exc:
                failed = write_failure(path, exc, "TensorBoard event file")
        if self._metrics_file is not None:
            fh, self._metrics_file = self._metrics_file, None
            try:
                fh.close()
            except OSError as exc:
                failed = failed or write_failure(self.metrics_path, exc)
        if failed is not None:
            raise failed

    # -- output ------------------------------------------------------------------------
    def line(self, text: str) -> None:
        if not self.quiet:
            self._print(text, self.out)

    def note(self, text: str) -> None:
        self._print(text, self.err)

    def _print(self, text: str, stream) -> None:
        with self._print_lock:
            self._clear_progress()
            print(text, file=stream, flush=True)
            self._last_output = time.monotonic()

    def metrics(self, phase: str, step: int, metrics: dict[str, float]) -> None:
        self.line(f"{phase} step-{step}, {format_metrics(metrics)}")
        if self.tensorboard is not None:
            self._board("scalars", phase.lower(), step, metrics)
        if "loss" in metrics and phase == "Train":
            self._last_loss = metrics["loss"]
        if self._metrics_file is not None:
            rec = {"phase": phase.lower(), "step": step, "time": round(time.time(), 3)}
            rec.update({k: float(v) for k, v in metrics.items()})
            self._append(rec)

    def _board(self, method: str, *args) -> None:
        """A call to the TensorBoard log; an OSError (a full disk) is a SingaError naming
        its folder and the free space."""
        try:
            getattr(self.tensorboard, method)(*args)
        except OSError as exc:
            board, self.tensorboard = self.tensorboard, None
            path = board.path
            _close_quietly(board)
            raise write_failure(path, exc, "TensorBoard event file") from None

    def evaluated(self, phase: str, step: int | None, seconds: float) -> None:
        """An evaluation pass (``"Test"``/``"Validation"``) took ``seconds``."""
        self.evaluation_seconds += seconds

    def checkpointed(self, step: int, path: str | None, seconds: float) -> None:
        """Checkpoint ``step`` was written to ``path`` in ``seconds``."""
        self.checkpoint_seconds += seconds

    def step_done(self, step: int, seconds: float) -> None:
        self._steps_done = step + 1
        self._activity = "training"
        self.train_seconds += seconds
        self.train_steps_timed += 1
        if seconds > 0.5 and len(self._step_times) >= 5:  # 10x slower than usual: say so
            usual = sorted(self._step_times)[len(self._step_times) // 2]
            if seconds > 10 * usual:
                self.note(
                    f"slow step: step {step + 1} took {seconds:.1f} s, "
                    f"{seconds / max(usual, 1e-9):.0f}x the median {usual * 1000:.1f} ms so far "
                    "(a busy machine, swapping, or a slow disk)"
                )
        self._step_times.append(seconds)
        if self.tensorboard is not None:
            self._board("step_done", seconds)
        if len(self._step_times) > 50:
            del self._step_times[:-50]
        if not self.live or self.quiet:
            return
        now = time.perf_counter()
        if now - self._last_draw < 0.2 and step + 1 < self._total:
            return
        self._last_draw = now
        done = step + 1
        eta = self._seconds_left(done, now)
        bar = "#" * int(done / max(self._total, 1) * 20)
        text = (
            f"\r[{bar:<20}] step {done}/{self._total}  {self.mean_step_ms:.1f} ms/step  "
            f"ETA {_fmt_seconds(eta)}"
        )
        if self._last_loss is not None:
            text += f"  loss {self._last_loss:.4f}"
        self.err.write(text + "\x1b[K")
        self.err.flush()
        self._progress_shown = True

    def _clear_progress(self) -> None:
        if self._progress_shown:
            self.err.write("\r\x1b[K")
            self.err.flush()
            self._progress_shown = False

    @property
    def mean_step_ms(self) -> float:
        return 1000 * sum(self._step_times) / max(len(self._step_times), 1)


def _close_quietly(handle) -> None:
    """Close a file being given up after a failed write; its own error adds nothing."""
    try:
        handle.close()
    except OSError:
        pass


def _fmt_seconds(s: float) -> str:
    s = int(s)
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"
