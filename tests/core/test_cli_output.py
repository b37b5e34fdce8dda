"""Honest numbers and clean output: the end-of-run line, one message after Ctrl-C, no
duplicated lines."""

from __future__ import annotations

import re
import subprocess
import sys
import time

from conftest import REPO, interrupt
from typer.testing import CliRunner

from singa_core.commands.cli import app

runner = CliRunner()
SPLIT = (
    r"(?P<wall>[\d.]+) s: set-up (?P<setup>[\d.]+) s, training (?P<train>[\d.]+) s "
    r"\((?P<steps>\d+) steps, [\d.]+ ms/step\), evaluation (?P<eval>[\d.]+) s, "
    r"checkpoints (?P<ckpt>[\d.]+) s, other (?P<other>[\d.]+) s"
)


def test_end_of_run_line_gives_wall_time_and_its_split(small_job):
    conf, ws = small_job(steps=60, checkpoint_freq=20)
    res = runner.invoke(app, ["train", str(conf), "-q"])
    assert res.exit_code == 0, res.output
    last = res.output.strip().splitlines()[-1]
    m = re.fullmatch(
        rf"finished at step 60 in {SPLIT}; test loss = [\d.]+, accuracy = [\d.]+; "
        r"checkpoint: .*step60-worker0",
        last,
    )
    assert m, last
    parts = {k: float(v) for k, v in m.groupdict().items()}
    assert parts["steps"] == 60  # (the small job's evaluations and checkpoints take ~0.0 s)
    total = sum(parts[k] for k in ("setup", "train", "eval", "ckpt", "other"))
    assert abs(total - parts["wall"]) <= 0.25  # rounding of five one-decimal numbers
    assert res.output.count("finished at step") == 1


def test_ctrl_c_prints_one_message(small_job):
    conf, ws = small_job(steps=100_000, checkpoint_freq=50)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "singa_core.commands.cli",
            "train",
            str(conf),
            "-q",
            "--no-tensorboard",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    def at_checkpoint_50():
        deadline = time.monotonic() + 300
        while not (ws / "checkpoint" / "step50-worker0").exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            time.sleep(0.05)

    out, err = interrupt(proc, at_checkpoint_50)
    assert proc.returncode == 130, err
    lines = [x for x in err.splitlines() if x.strip()]
    assert lines[-2] == "stopping after this step (Ctrl-C again to abort now)"
    m = re.fullmatch(
        rf"interrupted at step (\d+) after {SPLIT}; checkpoint (.*) written; "
        "continue with --resume",
        lines[-1],
    )
    assert m, lines[-1]
    assert m.group(9).endswith(f"step{m.group(1)}-worker0")
    assert "finished at" not in err and err.count("interrupted") == 1


def test_data_tells_each_file_once(data_dir, tmp_path):
    res = runner.invoke(
        app, ["data", "mnist", "--from", str(data_dir / "mnist"), "--out", str(tmp_path)]
    )
    assert res.exit_code == 0, res.output
    for name in ("train_data.bin", "test_data.bin"):
        assert res.output.count(str(tmp_path / name)) == 1, res.output
    assert len(res.output.splitlines()) == len(set(res.output.splitlines()))
