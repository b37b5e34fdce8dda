"""Run a whole job from its job.conf text, as ``singa train`` does, and read what it wrote.

:func:`run_job` writes the text to ``job.conf`` in a folder (a new temporary one unless
given), trains it through the real command line in this process with the workspace inside
that folder, and returns a :class:`JobRun`: exit status, printed output, every
``metrics.jsonl`` record and every checkpoint's Param values. :func:`blobs_csv` and
:func:`mlp_job` make a small, learnable job (CSV Gaussian blobs into a two-layer MLP) for
checks that need a real net, such as :func:`~singa_core.testing.workers.check_worker`.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


@dataclass
class JobRun:
    exit_code: int
    stdout: str
    stderr: str
    workspace: Path
    metrics: list[dict] = field(default_factory=list)  # metrics.jsonl records
    checkpoints: dict[int, dict[str, np.ndarray]] = field(default_factory=dict)

    def phase(self, name: str) -> list[dict]:
        """The records of one phase ("train", "test", "validation"), in order."""
        return [r for r in self.metrics if r.get("phase") == name]

    def last(self, name: str) -> dict:
        """The last record of a phase (AssertionError if there is none)."""
        records = self.phase(name)
        assert records, f"no {name} metrics were reported:\n{self.stdout}{self.stderr}"
        return records[-1]


def _read_checkpoints(workspace: Path) -> dict[int, dict[str, np.ndarray]]:
    from singa_core.running.checkpoint import STATE_SUFFIX, checkpoint_dir, read_params

    out: dict[int, dict[str, np.ndarray]] = {}
    d = checkpoint_dir(workspace)
    if not d.is_dir():
        return out
    for f in sorted(d.iterdir()):
        m = re.fullmatch(r"step(\d+)-worker\d+", f.name)
        if m and Path(str(f) + STATE_SUFFIX).exists():
            values = out.setdefault(int(m.group(1)), {})
            for rec in read_params(f):
                values[rec.name] = rec.value
    return out


def run_job(conf: str, folder: str | Path | None = None, *args: str, check: bool = True) -> JobRun:
    """Train ``conf`` (job.conf text) with ``singa train`` in this process.

    The workspace is ``folder/workspace`` (``--workspace`` overrides job.conf's); ``args``
    are more command-line arguments (``"-o", "train_steps=20"``, ``"--seed", "3"``). With
    ``check`` (default) a non-zero exit status raises AssertionError with the output.
    """
    from singa_core.commands.cli import app

    folder = Path(folder) if folder is not None else Path(tempfile.mkdtemp(prefix="singa-job-"))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "job.conf"
    path.write_text(conf)
    workspace = folder / "workspace"
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = app(
                ["train", str(path), "--workspace", str(workspace), *args],
                standalone_mode=False,
            )
        except SystemExit as exc:  # pragma: no cover - click may still exit
            code = exc.code
    code = int(code or 0)
    metrics = []
    mpath = workspace / "metrics.jsonl"
    if mpath.exists():
        metrics = [json.loads(line) for line in mpath.read_text().splitlines() if line.strip()]
    run = JobRun(
        code, out.getvalue(), err.getvalue(), workspace, metrics, _read_checkpoints(workspace)
    )
    if check and code != 0:
        raise AssertionError(f"singa train exited with {code}:\n{run.stdout}{run.stderr}")
    return run


def blobs_csv(path: str | Path, n: int = 200, dim: int = 4, classes: int = 3, seed: int = 0):
    """Write a small learnable CSV dataset ('label,x1,...,xd' lines of Gaussian blobs)."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(0, 3, size=(classes, dim))
    labels = rng.integers(0, classes, size=n)
    x = centers[labels] + rng.normal(0, 0.5, size=(n, dim))
    with open(path, "w") as f:
        for lab, row in zip(labels, x, strict=True):
            f.write(",".join([str(lab)] + [f"{v:.5f}" for v in row]) + "\n")
    return Path(path)


def mlp_job(
    data: str | Path,
    *,
    alg: str = "alg: kBP",
    updater: str = "type: kSGD momentum: 0.9",
    hidden_layer: str = "type: kSTanh",
    steps: int = 60,
    dim: int = 4,
    classes: int = 3,
    data_layer: str | None = None,
) -> str:
    """job.conf text of a small MLP over :func:`blobs_csv` data: kCSVInput → ip1 →
    ``hidden`` (``hidden_layer`` fields) → ip2 → kSoftmaxLoss. ``alg``: the
    ``train_one_batch`` fields; ``updater``: the updater's fields (its learning_rate
    defaults to a fixed 0.05); ``data_layer``: the data layer's fields instead of the
    kCSVInput reading ``data`` (e.g. a kRecordInput with another store backend)."""
    lr = "" if "learning_rate" in updater else "learning_rate { type: kFixed base_lr: 0.05 }"
    if data_layer is None:
        data_layer = (
            f'type: kCSVInput store_conf {{ backend: "textfile" path: "{data}" '
            f"batchsize: 20 shape: {dim} }}"
        )
    return f"""
name: "kit-mlp"
train_steps: {steps}
disp_freq: 10
test_steps: 2
test_freq: {steps}
train_one_batch {{ {alg} }}
updater {{ {updater} {lr} }}
neuralnet {{
  layer {{ name: "data" {data_layer} }}
  layer {{
    name: "ip1" type: kInnerProduct srclayers: "data"
    innerproduct_conf {{ num_output: 16 }}
    param {{ name: "w1" init {{ type: kUniform low: -0.3 high: 0.3 }} }}
    param {{ name: "b1" init {{ type: kConstant value: 0 }} }}
  }}
  layer {{ name: "hidden" srclayers: "ip1" {hidden_layer} }}
  layer {{
    name: "ip2" type: kInnerProduct srclayers: "hidden"
    innerproduct_conf {{ num_output: {classes} }}
    param {{ name: "w2" init {{ type: kGaussian std: 0.1 }} }}
    param {{ name: "b2" init {{ type: kConstant value: 0 }} }}
  }}
  layer {{ name: "loss" type: kSoftmaxLoss srclayers: "ip2" srclayers: "data" }}
}}
"""
