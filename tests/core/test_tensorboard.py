"""TensorBoard event files (singa_core.running.tensorboard): what a run writes equals metrics.jsonl,
for the in-process and the shm engine; histograms; a new run replaces the old curves; the
note without the extra; `tensorboard --logdir` serves the scalars."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from conftest import run_singa
from typer.testing import CliRunner

from singa_core.commands.cli import app
from singa_core.running.tensorboard import MISSING_NOTE, histogram

pytest.importorskip("tensorboardX")
pytest.importorskip("tensorboard")

runner = CliRunner()


def read_events(logdir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0, "histograms": 0})
    acc.Reload()
    return acc


def last_run(metrics_path):
    """The metric records of the newest run in metrics.jsonl: (phase, step) -> record."""
    recs = [json.loads(line) for line in metrics_path.read_text().splitlines()]
    begin = max(i for i, r in enumerate(recs) if r.get("event") == "start")
    return {(r["phase"], r["step"]): r for r in recs[begin:] if "phase" in r}


def assert_events_equal_metrics(ws):
    acc = read_events(ws / "tensorboard")
    records = last_run(ws / "metrics.jsonl")
    expected: dict[str, list[tuple[int, float]]] = {}
    for (phase, step), rec in records.items():
        for k, v in rec.items():
            if k not in ("phase", "step", "time", "non_finite"):
                expected.setdefault(f"{phase}/{k}", []).append((step, v))
    assert {"train/loss", "train/accuracy", "train/lr", "test/loss", "test/accuracy"} <= set(
        expected
    )
    scalars = set(acc.Tags()["scalars"])
    assert set(expected) | {"train/step_ms"} == scalars
    for tag, points in expected.items():
        got = [(e.step, e.value) for e in acc.Scalars(tag)]
        assert [s for s, _ in got] == sorted(s for s, _ in points), tag
        for (s, v), (_, want) in zip(got, sorted(points), strict=True):
            assert v == pytest.approx(want, rel=1e-6, abs=1e-7), (tag, s)
    train_steps = sorted(s for (p, s) in records if p == "train")
    step_ms = acc.Scalars("train/step_ms")
    assert [e.step for e in step_ms] == train_steps
    assert all(e.value > 0 and math.isfinite(e.value) for e in step_ms)
    return acc


def test_inprocess_events_equal_metrics_and_histograms(small_job):
    conf, ws = small_job()
    res = runner.invoke(app, ["train", str(conf), "--seed", "1", "--histograms", "-q"])
    assert res.exit_code == 0, res.output
    acc = assert_events_equal_metrics(ws)
    hist_tags = set(acc.Tags()["histograms"])
    assert hist_tags == {f"{k}/{n}" for k in ("param", "grad") for n in ("w1", "b1", "w2", "b2")}
    w1 = acc.Histograms("param/w1")
    assert [h.step for h in w1] == [0, 10, 20, 30, 40, 50]  # every disp_freq steps
    assert w1[0].histogram_value.num == 4 * 16
    assert sum(w1[0].histogram_value.bucket) == pytest.approx(64)
    # the weights move: the value histograms of step 0 and step 50 differ
    assert w1[0].histogram_value.sum != w1[-1].histogram_value.sum


def test_new_run_replaces_the_old_curves(small_job):
    conf, ws = small_job()
    for seed in ("1", "2"):
        res = runner.invoke(app, ["train", str(conf), "--seed", seed, "-q"])
        assert res.exit_code == 0, res.output
    assert len(list((ws / "tensorboard").iterdir())) == 2
    acc = assert_events_equal_metrics(ws)  # the second run's values only
    assert acc.Tags()["histograms"] == []  # off by default


@pytest.mark.slow
def test_shm_engine_events_equal_metrics(small_job):
    conf, ws = small_job()
    res = run_singa("train", str(conf), "--seed", "3", "--engine", "shm", "-q", "--histograms")
    assert res.returncode == 0, res.stderr
    acc = assert_events_equal_metrics(ws)
    # histograms come from the display worker's process through the launcher's Reporter
    assert "grad/w2" in acc.Tags()["histograms"]
    assert [h.step for h in acc.Histograms("param/w1")] == [0, 10, 20, 30, 40, 50]


def test_missing_extra_is_one_note(small_job, monkeypatch):
    conf, ws = small_job(steps=20)
    monkeypatch.setitem(sys.modules, "tensorboardX", None)  # import fails
    res = runner.invoke(app, ["train", str(conf), "-q"])
    assert res.exit_code == 0, res.output
    assert res.output.count(MISSING_NOTE) == 1
    assert not (ws / "tensorboard").exists()
    assert (ws / "metrics.jsonl").exists()
    res = runner.invoke(app, ["train", str(conf), "-q", "--no-tensorboard"])
    assert MISSING_NOTE not in res.output


def test_histogram_summary():
    rng = np.random.default_rng(0)
    small = rng.normal(size=(20, 30)).astype(np.float32)
    h = histogram(small, bins=10)
    counts, edges = np.histogram(small, bins=10, range=(small.min(), small.max()))
    assert h["bucket_counts"] == counts.tolist()  # exact below the sample size
    assert h["bucket_limits"] == pytest.approx(edges[1:].tolist())
    assert h["num"] == 600 and h["sum"] == pytest.approx(float(small.sum()), rel=1e-5)
    assert h["sum_squares"] == pytest.approx(float((small.astype(np.float64) ** 2).sum()), 1e-5)
    big = rng.uniform(-1, 1, size=300_000).astype(np.float32)
    hb = histogram(big, bins=4, sample=1 << 14)
    assert hb["min"] == float(big.min()) and hb["max"] == float(big.max())
    assert sum(hb["bucket_counts"]) == pytest.approx(300_000)
    assert hb["bucket_counts"] == pytest.approx([75_000] * 4, rel=0.05)  # sampled counts
    assert histogram(np.full(5, 2.0, np.float32))["bucket_counts"] == [5.0]


SERVE = textwrap.dedent(
    """
    import json, socket, subprocess, sys, time, urllib.request
    logdir = sys.argv[1]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-c", "from tensorboard.main import run_main; run_main()",
         "--logdir", logdir, "--host", "127.0.0.1", "--port", str(port), "--load_fast=false"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/data/plugin/scalars/scalars?run=.&tag=train/loss"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(url, timeout=5) as r:
                    body = json.loads(r.read())
                if body:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                sys.exit("tensorboard did not serve the scalars")
            time.sleep(0.5)
        print(json.dumps(body))
    finally:
        proc.terminate()  # by its pid
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    """
)


@pytest.mark.slow
def test_tensorboard_serves_the_scalars(small_job, tmp_path):
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare for a private network namespace")
    probe = subprocess.run(["unshare", "-n", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot create a network namespace: {probe.stderr.decode().strip()}")
    conf, ws = small_job()
    res = runner.invoke(app, ["train", str(conf), "--seed", "1", "-q"])
    assert res.exit_code == 0, res.output
    script = tmp_path / "serve.py"
    script.write_text(SERVE)
    # listens only on the loopback of a namespace of its own
    cmd = f"ip link set lo up && exec {sys.executable} {script} {ws / 'tensorboard'}"
    out = subprocess.run(
        ["unshare", "-n", "bash", "-c", cmd], capture_output=True, text=True, timeout=180
    )
    assert out.returncode == 0, out.stderr
    served = [(step, value) for _, step, value in json.loads(out.stdout)]
    want = sorted(
        (s, r["loss"]) for (p, s), r in last_run(ws / "metrics.jsonl").items() if p == "train"
    )
    assert [s for s, _ in served] == [s for s, _ in want]
    assert [v for _, v in served] == pytest.approx([v for _, v in want], rel=1e-6)


def test_writer_is_imported_without_pytorch(tmp_path):
    """tensorboardX imports torch when it can; singa logs numpy only, so a run must not
    pay PyTorch's ~200 MiB for its logs (a fresh interpreter: torch not yet imported)."""
    import importlib.util
    import subprocess
    import sys

    if importlib.util.find_spec("torch") is None:
        pytest.skip("PyTorch is not installed: nothing for tensorboardX to import")
    code = (
        "import sys\n"
        "from singa_core.running.tensorboard import TensorBoardLog\n"
        f"log = TensorBoardLog.create({str(tmp_path)!r})\n"
        "assert log is not None\n"
        "log.start(0)\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_the_writer_is_imported_when_the_run_starts_not_before(tmp_path):
    """A run refused before its first step (a Ray job that does not fit what is free, say)
    does not pay for importing tensorboardX: creating the log only checks that it is
    installed; it is imported at the run's start (a fresh interpreter)."""
    import importlib.util
    import subprocess
    import sys

    if importlib.util.find_spec("tensorboardX") is None:
        pytest.skip("tensorboardX is not installed")
    code = (
        "import sys\n"
        "from singa_core.running.tensorboard import TensorBoardLog\n"
        f"log = TensorBoardLog.create({str(tmp_path)!r})\n"
        "print(log is not None, 'tensorboardX' in sys.modules)\n"
        "log.start(0)\n"
        "print('tensorboardX' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "False", "True"]


def test_a_writer_that_fails_to_import_at_the_start_is_one_note_and_no_log(tmp_path, monkeypatch):
    import io

    from singa_core.running import tensorboard

    if tensorboard.writer_problem(import_it=False) is not None:
        pytest.skip("tensorboardX is not installed")
    err = io.StringIO()
    log = tensorboard.TensorBoardLog.create(tmp_path / "tb", histograms=True, err=err)
    assert log is not None and err.getvalue() == ""

    def broken():
        raise RuntimeError("a broken torch")

    monkeypatch.setattr(tensorboard, "_import_summary_writer", broken)
    log.start(0)
    assert "tensorboardX failed to import (a broken torch)" in err.getvalue()
    assert not log.histograms_enabled
    log.scalars("train", 0, {"loss": 1.0})  # a no-op
    log.close()
    assert not (tmp_path / "tb").exists()
