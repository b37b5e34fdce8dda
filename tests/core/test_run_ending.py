"""A run ends with an answer: the test (and validation) net evaluated at the last step and
named in the closing line; without a terminal, a progress line when nothing was printed
for a while."""

from __future__ import annotations

import io
import time

import pytest

from singa_core.running.reporting import Reporter
from singa_core.testing import blobs_csv, mlp_job, run_job


def _job(tmp_path, **kw):
    data = blobs_csv(tmp_path / "blobs.csv", n=200)
    # test_freq 25 over 60 steps: the loop tests at 0, 25 and 50, never at 60 by itself
    return mlp_job(data, steps=60, **kw).replace("test_freq: 60", "test_freq: 25")


def test_the_last_step_is_evaluated_and_named_in_the_closing_line(tmp_path):
    conf = _job(tmp_path).replace(
        "test_steps: 2", "test_steps: 2\nvalidate_steps: 1\nvalidate_freq: 40"
    )
    run = run_job(conf, tmp_path / "a")
    assert [r["step"] for r in run.phase("test")] == [0, 25, 50, 60]
    assert [r["step"] for r in run.phase("validation")] == [0, 40, 60]
    final = run.last("test")
    assert final["accuracy"] > 0.8  # the blobs are separable; 60 steps learn them
    closing = (run.stdout + run.stderr).strip().splitlines()[-1]
    assert closing.startswith("finished at step 60"), closing
    # six decimals, or six significant digits below 1e-3 (a loss this run may reach)
    shown = {k: f"{v:.6f}" if abs(v) >= 1e-3 or v == 0 else f"{v:.6g}" for k, v in final.items()
             if k in ("loss", "accuracy")}  # fmt: skip
    assert f"test loss = {shown['loss']}, accuracy = {shown['accuracy']}" in closing
    assert "validation " in closing and closing.index("validation") < closing.index("test ")
    # the final checkpoint records the evaluations: resuming it repeats none of them
    again = run_job(conf, tmp_path / "a", "--resume")
    assert [r["step"] for r in again.phase("test")] == [0, 25, 50, 60]


def test_a_step_already_evaluated_by_the_loop_is_evaluated_once(tmp_path):
    conf = _job(tmp_path).replace("test_freq: 25", "test_freq: 20")  # 0, 20, 40; 60 at the end
    run = run_job(conf, tmp_path / "b", "-o", "train_steps=40")
    assert [r["step"] for r in run.phase("test")] == [0, 20, 40]


@pytest.mark.slow
def test_an_interrupted_run_is_not_evaluated_at_the_end(tmp_path, monkeypatch):
    import singa_core.running.training as training

    original = training.TrainingLoop.run

    class StopAfterFirstStep:  # as a first Ctrl-C during step 0 would
        def __init__(self, loop, inner):
            self.loop, self.inner = loop, inner

        def train_one_batch(self, step, net, stub):
            self.inner.train_one_batch(step, net, stub)
            self.loop.request_stop()

        def __getattr__(self, name):
            return getattr(self.inner, name)

    def run(self, start_step, **kw):
        self.worker = StopAfterFirstStep(self, self.worker)
        return original(self, start_step, **kw)

    monkeypatch.setattr(training.TrainingLoop, "run", run)
    result = run_job(_job(tmp_path), tmp_path / "c", check=False)
    assert "interrupted at step 1" in result.stdout + result.stderr
    assert [r["step"] for r in result.phase("test")] == [0]


def test_without_a_terminal_a_quiet_phase_prints_a_progress_line():
    out, err = io.StringIO(), io.StringIO()
    rep = Reporter(out=out, err=err, live=False, heartbeat_seconds=0.2)
    t0 = time.monotonic()
    rep.start(0, 10)
    rep.step_done(0, 0.05)
    rep.begin("test")
    time.sleep(0.7)
    # a loaded machine may wake the heartbeat late: the silence lasts until its first line
    deadline = time.monotonic() + 30
    while "progress:" not in err.getvalue() and time.monotonic() < deadline:
        time.sleep(0.05)
    rep.finish()
    silence = time.monotonic() - t0  # a loaded machine may also sleep longer than asked
    lines = [line for line in err.getvalue().splitlines() if line.startswith("progress:")]
    assert lines, err.getvalue()
    assert lines[0].startswith("progress: step 1/10 (test), 50.0 ms/step, ETA ")
    # at most one line per interval: one per 0.2 s of silence (3 in 0.7 s, more if it was longer)
    assert len(lines) <= silence / 0.2 + 1, (silence, lines)


def test_output_in_between_postpones_the_progress_line():
    out, err = io.StringIO(), io.StringIO()
    # output every 0.1 s for 2.5 s, a heartbeat after 1.5 s of silence: without the output
    # in between it would print; with it, only a pause of 1.4 s more than asked (a loaded
    # machine waking this thread late) could let it
    rep = Reporter(out=out, err=err, live=False, heartbeat_seconds=1.5)
    rep.start(0, 30)
    for step in range(25):
        rep.step_done(step, 0.01)
        rep.metrics("Train", step, {"loss": 1.0})
        time.sleep(0.1)
    rep.finish()
    assert "progress:" not in err.getvalue()


def test_a_terminal_or_quiet_run_has_no_progress_lines():
    for kw in ({"live": True}, {"live": False, "quiet": True}):
        err = io.StringIO()
        rep = Reporter(out=io.StringIO(), err=err, heartbeat_seconds=0.1, **kw)
        rep.start(0, 10)
        time.sleep(0.35)
        rep.finish()
        assert "progress:" not in err.getvalue()
