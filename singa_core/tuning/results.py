"""What a study shows and leaves: the live table, the best trials, ``best.conf`` and the
trial workspaces pruned to the best N.

The live table (trial, its values, step, objective, state, time) is redrawn in place on a
terminal, once a second; elsewhere (a log file) a line is printed as each trial starts and
ends. ``best.conf`` is the study's job.conf with the best trial's values set: a complete
job.conf (comments are not kept) whose workspace is ``STUDY/best``, so ``singa train
STUDY/best.conf --seed S`` (the trial's seed; with the trial's BLAS thread count,
``OPENBLAS_NUM_THREADS=T``) trains the trial's model again, to the same metrics.
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

from singa_core.running.fileio import atomic_write_bytes


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, str) and any(c in v for c in ".eE") and not v.startswith("k"):
        try:
            return f"{float(v):.4g}"  # a real value's full -o text, shortened for the table
        except ValueError:
            pass
    return str(v)


def _seconds(s) -> str:
    if s is None:
        return "-"
    return f"{s:.0f} s" if s >= 10 else f"{s:.1f} s"


def table_rows(space, records) -> tuple[list[str], list[list[str]]]:
    heads = ["trial", *(d.short for d in space.dims), "step", space.objective.metric, "state",
             "time"]  # fmt: skip
    rows = []
    for r in records:
        vals = [_fmt(r.params.get(d.field)) for d in space.dims]
        value = r.value if r.value is not None else (r.curve[-1][1] if r.curve else None)
        state = r.state if not r.reason or r.state != "failed" else "failed"
        rows.append([str(r.number), *vals, _fmt(r.step), _fmt(value), state, _seconds(r.seconds)])
    return heads, rows


def format_table(heads: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[k]) for r in rows)) if rows else len(h)
              for k, h in enumerate(heads)]  # fmt: skip
    out = ["  ".join(h.ljust(w) for h, w in zip(heads, widths, strict=True)).rstrip()]
    for row in rows:
        out.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return out


def best_records(space, records, n: int = 5):
    done = [r for r in records if r.state == "complete" and r.value is not None]
    return sorted(done, key=lambda r: -r.value if space.objective.maximize else r.value)[:n]


class LiveTable:
    """The study's progress on ``err`` (see the module docstring)."""

    def __init__(self, space, err=None, live: bool | None = None, every: float = 1.0) -> None:
        self.space = space
        self.err = err or sys.stderr
        self.live = self.err.isatty() if live is None else live
        self.every = every
        self._drawn = 0
        self._last = 0.0
        self._said: dict[int, str] = {}

    def update(self, records, force: bool = False) -> None:
        if self.live:
            now = time.monotonic()
            if not force and now - self._last < self.every:
                return
            self._last = now
            heads, rows = table_rows(self.space, records[-30:])
            lines = format_table(heads, rows)
            width = shutil.get_terminal_size((120, 24)).columns
            if self._drawn:
                self.err.write(f"\x1b[{self._drawn}F\x1b[J")
            self.err.write("".join(line[:width] + "\n" for line in lines))
            self.err.flush()
            self._drawn = len(lines)
            return
        for r in records:  # a line per change of state
            if self._said.get(r.number) == r.state:
                continue
            self._said[r.number] = r.state
            vals = ", ".join(f"{d.short}={_fmt(r.params.get(d.field))}" for d in self.space.dims)
            value = r.value if r.value is not None else (r.curve[-1][1] if r.curve else None)
            metric = self.space.objective.metric
            if r.state == "running":
                line = f"trial {r.number} started: {vals}"
            elif r.state == "failed":
                line = f"trial {r.number} failed: {r.reason}"
            elif r.state == "pruned":
                line = f"trial {r.number} stopped early at step {r.step}: {metric} {_fmt(value)}"
            elif r.state == "interrupted":
                line = f"trial {r.number} interrupted at step {_fmt(r.step)}"
            else:
                line = (
                    f"trial {r.number} {r.state} at step {_fmt(r.step)}: {metric} {_fmt(value)}"
                    f" ({_seconds(r.seconds)})"
                )
            print(line, file=self.err, flush=True)

    def close(self) -> None:
        self._drawn = 0


def best_conf_text(cfg, space, record, study_dir: Path, record_note: str) -> str:
    """The job.conf of ``record`` (see the module docstring)."""
    from google.protobuf import text_format

    from singa_core.jobconf.parse import apply_override

    job = type(cfg.job)()
    job.CopyFrom(cfg.job)
    c = type(cfg)(job=job, path=cfg.path, text=cfg.text)
    for dim in space.dims:
        if dim.field in record.params:
            apply_override(c, dim.override(record.params[dim.field]))
    if space.train_steps is not None:
        job.train_steps = space.train_steps
    if record.step is not None and record.step < job.train_steps:
        job.train_steps = record.step  # it stopped at its time limit there
    job.cluster.workspace = str(Path(study_dir) / "best")
    values = ", ".join(f"{d.field}={d.text(record.params[d.field])}" for d in space.dims)
    head = (
        f"# best.conf of the study {study_dir}: trial {record.number}, "
        f"{space.objective.phase} {space.objective.metric} = {_fmt(record.value)}\n"
        f"# {values}\n# {record_note}\n"
    )
    return head + text_format.MessageToString(job)


def write_best_conf(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode(), "best.conf")


def _size(folder: Path) -> int:
    total = 0
    for p in folder.rglob("*"):
        try:
            if p.is_file() and not p.is_symlink():
                total += p.stat().st_size
        except OSError:
            pass
    return total


def prune_workspaces(space, records, keep: int) -> tuple[list[int], int]:
    """Remove the checkpoints (and TensorBoard files) of every ended trial but the best
    ``keep``; each keeps its metrics.jsonl and trial.log (its curve and its log). Returns
    the trials pruned and the bytes freed."""
    best = {r.number for r in best_records(space, records, keep)} if keep > 0 else set()
    pruned, freed = [], 0
    for r in records:
        if r.number in best or r.state not in ("complete", "pruned", "failed"):
            continue
        if not r.workspace:
            continue
        ws = Path(r.workspace)
        targets = [ws / "checkpoint", ws / "tensorboard", *ws.glob("checkpoint.before-*")]
        gone = 0
        for t in targets:
            if t.is_dir() and not t.is_symlink():
                gone += _size(t)
                shutil.rmtree(t, ignore_errors=True)
        if gone:
            pruned.append(r.number)
            freed += gone
    return pruned, freed


def size_text(n: int) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n} B"
