"""``singa plot``: training curves from WORKSPACE/metrics.jsonl, as a PNG or in the terminal.

:func:`read_curves` reads the newest run of a workspace's metrics.jsonl (the records after
its last non-resumed ``start`` event; a resumed run's records continue it) into curves
``(phase, metric) -> [(step, value), ...]``; non-finite values (``null``) are left out.
:func:`plot_png` draws one panel per metric (loss and accuracy by default) with every
workspace in its own colour and each phase in its own line style (train solid, test
dashed, validation dotted), through matplotlib (optional extra ``singa-classic[plot]``).
:func:`plot_terminal` draws the same panels with characters and needs nothing.
"""

from __future__ import annotations

import io
import json
import math
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from singa_core.contracts.errors import Location, SingaError
from singa_core.running.fileio import atomic_write_bytes
from singa_core.running.paths import _kind as path_kind
from singa_core.running.paths import bad_path_text, readable_file_problem

PHASES = ("train", "test", "validation")
DEFAULT_METRICS = ("loss", "accuracy")
PLOT_EXTRA_HELP = "pip install 'singa-classic[plot]' (or draw in the terminal: --terminal)"


@dataclass
class Curves:
    """The newest run of one workspace."""

    label: str
    path: Path | None = None  # the metrics.jsonl read
    series: dict[tuple[str, str], list[tuple[int, float]]] = field(default_factory=dict)

    @property
    def metrics(self) -> list[str]:
        seen: list[str] = []
        for _, m in self.series:
            if m not in seen:
                seen.append(m)
        return seen


def metrics_file(workspace: Path) -> Path:
    """WORKSPACE/metrics.jsonl (or the path itself when it names a .jsonl file)."""
    p = Path(workspace)
    return p if p.suffix == ".jsonl" else p / "metrics.jsonl"


_WORKSPACE_HELP = (
    "give a workspace folder that `singa train` has written (cluster.workspace of the "
    "job.conf, or --workspace), or its metrics.jsonl"
)


def _workspace_problem(workspace: Path) -> str | None:
    """What is wrong with WORKSPACE as a folder to read metrics.jsonl from (None: a folder,
    or nothing there: then the missing metrics.jsonl is the error)."""
    text = str(workspace)
    bad = bad_path_text(text)
    if bad:
        return f"the name {bad}"
    try:
        mode = os.stat(text).st_mode
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot be examined: {exc.strerror or exc}"
    if stat.S_ISDIR(mode):
        return None
    kind = "a file" if stat.S_ISREG(mode) else path_kind(mode)
    return f"is {kind}, not a workspace folder"


def read_curves(workspace: Path, label: str | None = None) -> Curves:
    path = metrics_file(workspace)
    problem = None if Path(workspace).suffix == ".jsonl" else _workspace_problem(workspace)
    if problem is None:
        problem = readable_file_problem(str(path))
        if problem == "does not exist":
            raise SingaError(
                "no metrics.jsonl here", where=str(path), help=_WORKSPACE_HELP
            ) from None
        if problem is not None:
            problem = f"the metrics file {problem}"
    if problem is not None:
        raise SingaError(
            f"cannot plot {workspace}: {problem}", where=str(workspace), help=_WORKSPACE_HELP
        )
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise SingaError(
            f"cannot read the metrics file: {exc}",
            where=str(path),
            help="give the workspace folder that holds metrics.jsonl",
        ) from None
    records: list[tuple[int, dict]] = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            if i == len(lines):  # the partial last line of a killed run
                continue
            raise SingaError(
                "not a JSON record",
                where=Location(str(path), i),
                help="metrics.jsonl holds one JSON object a line, as `singa train` writes it",
            ) from None
        if isinstance(rec, dict):
            records.append((i, rec))
    begin = 0
    for k, (_, rec) in enumerate(records):
        if rec.get("event") == "start" and not rec.get("resumed"):
            begin = k
    curves = Curves(label or _label(path), path)
    for _, rec in records[begin:]:
        phase, step = rec.get("phase"), rec.get("step")
        if phase is None or not isinstance(step, int):
            continue
        for name, value in rec.items():
            if name in ("phase", "step", "time", "non_finite"):
                continue
            if isinstance(value, int | float) and math.isfinite(value):
                curves.series.setdefault((phase, name), []).append((step, float(value)))
    for points in curves.series.values():
        points.sort()
    return curves


def _label(path: Path) -> str:
    ws = path.parent.resolve()
    return ws.name or str(ws)


def choose_metrics(runs: list[Curves], wanted: list[str] | None) -> list[str]:
    """The panels: ``wanted`` if given, else loss and accuracy (those present), else every
    metric but the learning rate."""
    present: list[str] = []
    for run in runs:
        present += [m for m in run.metrics if m not in present]
    if wanted:
        missing = [m for m in wanted if m not in present]
        if missing:
            raise SingaError(
                f"no metric {', '.join(repr(m) for m in missing)} in the runs",
                where="--metric",
                help=f"the runs have: {', '.join(present) or 'no metrics'}",
            )
        return list(wanted)
    chosen = [m for m in DEFAULT_METRICS if m in present]
    chosen = chosen or [m for m in present if m != "lr"]
    if not chosen:
        raise SingaError(
            "the runs have no metrics to plot yet",
            where=", ".join(str(r.path) for r in runs),
            help="plot after the first display step (disp_freq) of `singa train`",
        )
    return chosen


def _unique_labels(workspaces: list[Path]) -> list[str]:
    labels = [_label(metrics_file(w)) for w in workspaces]
    if len(set(labels)) < len(labels):  # same folder names: use the paths as given
        labels = [str(w) for w in workspaces]
    if len(set(labels)) < len(labels):  # the same workspace twice
        labels = [f"{label} ({i + 1})" for i, label in enumerate(labels)]
    return labels


def load_runs(workspaces: list[Path]) -> list[Curves]:
    return [
        read_curves(w, label)
        for w, label in zip(workspaces, _unique_labels(workspaces), strict=True)
    ]


# -- PNG -------------------------------------------------------------------------------
STYLES = {"train": "-", "test": "--", "validation": ":"}


def plot_png(runs: list[Curves], metrics: list[str], out: Path) -> Path:
    """Draw ``metrics`` of ``runs`` into the PNG ``out`` (written atomically)."""
    try:
        import matplotlib
    except ImportError:
        raise SingaError("`singa plot` needs matplotlib for a PNG", help=PLOT_EXTRA_HELP) from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    fig, axes = plt.subplots(1, len(metrics), figsize=(6 * len(metrics), 4.5), squeeze=False)
    for ax, metric in zip(axes[0], metrics, strict=True):
        for i, run in enumerate(runs):
            for phase in PHASES:
                points = run.series.get((phase, metric))
                if not points:
                    continue
                steps, values = zip(*points, strict=True)
                ax.plot(
                    steps,
                    values,
                    STYLES[phase],
                    color=colours[i % len(colours)],
                    marker="o" if len(points) == 1 else None,
                    linewidth=1.6,
                    label=f"{run.label} {phase}" if len(runs) > 1 else phase,
                )
        ax.set_title(metric)
        ax.set_xlabel("step")
        ax.grid(True, alpha=0.3)
        if ax.lines:
            ax.legend(fontsize="small")
    fig.tight_layout()
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png", dpi=100)
    finally:
        plt.close(fig)
    atomic_write_bytes(out, buf.getvalue(), "plot")
    return out


# -- terminal --------------------------------------------------------------------------
MARKS = {"train": "*", "test": "o", "validation": "+"}
RUN_MARKS = "*o+x#@%&"


def plot_terminal(runs: list[Curves], metrics: list[str], width: int = 80, height: int = 16) -> str:
    """The panels as text: per metric a ``height``-row canvas with a y axis, the steps
    below and a legend (one character per series)."""
    blocks = []
    for metric in metrics:
        series = []
        for i, run in enumerate(runs):
            for phase in PHASES:
                points = run.series.get((phase, metric))
                if points:
                    mark = (
                        MARKS[phase]
                        if len(runs) == 1
                        else RUN_MARKS[(i * len(PHASES) + PHASES.index(phase)) % len(RUN_MARKS)]
                    )
                    name = phase if len(runs) == 1 else f"{run.label} {phase}"
                    series.append((mark, name, points))
        blocks.append(_panel(metric, series, width, height))
    return "\n\n".join(blocks)


def _panel(title: str, series, width: int, height: int, xlabel: str = "step") -> str:
    if not series:
        return f"{title}: no values"
    steps = [s for _, _, pts in series for s, _ in pts]
    values = [v for _, _, pts in series for _, v in pts]
    x0, x1 = min(steps), max(steps)
    y0, y1 = min(values), max(values)
    if y1 == y0:
        y0, y1 = y0 - 0.5, y1 + 0.5
    if x1 == x0:
        x1 = x0 + 1
    ylab = [f"{y1:.4g}", f"{(y0 + y1) / 2:.4g}", f"{y0:.4g}"]
    lw = max(len(s) for s in ylab)
    cols = max(width - lw - 2, 10)
    grid = [[" "] * cols for _ in range(height)]

    def cell(step: float, value: float) -> tuple[int, int]:
        c = round((step - x0) / (x1 - x0) * (cols - 1))
        r = round((y1 - value) / (y1 - y0) * (height - 1))
        return r, c

    for mark, _, pts in series:
        prev = None
        for s, v in pts:
            r, c = cell(s, v)
            if prev is not None:  # the line between consecutive points, one cell a column
                pr, pc = prev
                for cc in range(pc + 1, c):
                    rr = pr + round((r - pr) * (cc - pc) / (c - pc))
                    grid[rr][cc] = mark
            grid[r][c] = mark
            prev = (r, c)
    lines = [title]
    for r in range(height):
        if r == 0:
            lab = ylab[0]
        elif r == height - 1:
            lab = ylab[2]
        elif r == (height - 1) // 2:
            lab = ylab[1]
        else:
            lab = ""
        lines.append(f"{lab:>{lw}} |{''.join(grid[r])}")
    lines.append(" " * lw + " +" + "-" * cols)
    left, right = f"{x0}", f"{max(steps)}"
    lines.append(" " * (lw + 2) + left + right.rjust(cols - len(left)) + f"  ({xlabel})")
    lines.append(" " * (lw + 2) + "   ".join(f"{m} {name}" for m, name, _ in series))
    return "\n".join(lines)


# -- a study (singa tune's folder) -----------------------------------------------------------
def is_study(folder: Path) -> bool:
    """Whether ``folder`` is a study folder of `singa tune` (it holds study.json)."""
    return (Path(folder) / "study.json").is_file()


@dataclass
class StudyCurves:
    """A study to draw: the objective of each ended trial by trial number, the best so far,
    and each trial's objective at its test passes."""

    title: str
    metric: str
    by_trial: dict[str, list[tuple[int, float]]]  # "complete"/"pruned" -> (trial, value)
    best: list[tuple[int, float]]
    curves: list[tuple[int, str, list[tuple[int, float]]]]  # (trial, state, points)


def read_study(folder: Path) -> StudyCurves:
    from singa_core.tuning.study import open_study

    study = open_study(folder)
    obj = study.space.objective
    by_trial: dict[str, list[tuple[int, float]]] = {"complete": [], "pruned": []}
    best: list[tuple[int, float]] = []
    curves = []
    top = None
    for r in study.trials():
        if r.curve:
            curves.append((r.number, r.state, list(r.curve)))
        value = r.value if r.state == "complete" else (r.curve[-1][1] if r.curve else None)
        if value is None or r.state not in by_trial:
            continue
        by_trial[r.state].append((r.number, value))
        if r.state == "complete":
            better = top is None or (value > top if obj.maximize else value < top)
            top = value if better else top
            best.append((r.number, top))
    if not curves:
        raise SingaError(
            "the study has no test pass to plot yet",
            where=str(folder),
            help="plot after its first trial's first test pass (`singa tune --show` lists them)",
        )
    return StudyCurves(study.record.name, obj.metric, by_trial, best, curves)


def plot_study_png(data: StudyCurves, out: Path) -> Path:
    """Two panels: the objective over the trials (and the best so far), each trial's
    objective over its steps (stopped-early trials dashed)."""
    try:
        import matplotlib
    except ImportError:
        raise SingaError("`singa plot` needs matplotlib for a PNG", help=PLOT_EXTRA_HELP) from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for state, mark in (("complete", "o"), ("pruned", "x")):
        pts = data.by_trial[state]
        if pts:
            xs, ys = zip(*pts, strict=True)
            left.plot(xs, ys, mark, label="stopped early" if state == "pruned" else state)
    if data.best:
        xs, ys = zip(*data.best, strict=True)
        left.step(xs, ys, where="post", linewidth=1.6, label="best so far")
    left.set_title(f"{data.metric} by trial ({data.title})")
    left.set_xlabel("trial")
    for number, state, pts in data.curves:
        steps, values = zip(*pts, strict=True)
        right.plot(steps, values, "--" if state == "pruned" else "-", linewidth=1.2,
                   label=f"trial {number}")  # fmt: skip
    right.set_title(f"{data.metric} at each test pass")
    right.set_xlabel("step")
    for ax in (left, right):
        ax.grid(True, alpha=0.3)
        if ax.lines and len(ax.lines) <= 12:
            ax.legend(fontsize="small")
    fig.tight_layout()
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png", dpi=100)
    finally:
        plt.close(fig)
    atomic_write_bytes(out, buf.getvalue(), "plot")
    return out


def plot_study_terminal(data: StudyCurves, width: int = 80, height: int = 16) -> str:
    marks = {"complete": "o", "pruned": "x"}
    series = [(marks[s], "stopped early" if s == "pruned" else s, pts)
              for s, pts in data.by_trial.items() if pts]  # fmt: skip
    if data.best:
        series.append(("*", "best so far", data.best))
    first = _panel(f"{data.metric} by trial ({data.title})", series, width, height, "trial")
    curves = [(RUN_MARKS[i % len(RUN_MARKS)], f"trial {n}", pts)
              for i, (n, _, pts) in enumerate(data.curves)]  # fmt: skip
    return first + "\n\n" + _panel(f"{data.metric} at each test pass", curves, width, height)
