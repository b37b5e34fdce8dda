"""The BLAS thread trial is bounded step by step (issue 38, point 5: one 2-thread step took
36.8 s on a busy machine): a step over the larger of 2 s and 3x the first timed step ends
the trial with the steps timed so far, and the `BLAS threads:` line says so. A virtual
clock: each run "takes" the seconds scripted for it."""

from __future__ import annotations

import pytest

from singa_core.running import thread_trial as tt


def _script(durations):
    """(run_once, clock): run_once advances the clock by the next scripted duration."""
    now = [0.0]
    left = list(durations)
    ran = []

    def run_once():
        d = left.pop(0)
        ran.append(d)
        now[0] += d

    return run_once, (lambda: now[0]), ran


def test_a_slow_n_thread_step_ends_the_trial_with_what_it_has():
    # warm-up, then 1 thread 62.5 ms, 2 threads 36.75 s: nothing more runs (durations
    # exact in binary, so the virtual clock's differences are too)
    run_once, clock, ran = _script([0.0625, 0.0625, 36.75, 0.0625, 0.03125])
    times, ended = tt.trial_times(run_once, 2, clock=clock)
    assert times == {1: [0.0625], 2: [36.75]} and len(ran) == 3
    assert "the trial ended early: a 2-thread step took 36.8 s, over its bound of 2.0 s" in ended


def test_a_slow_1_thread_step_ends_it_too():
    run_once, clock, ran = _script([0.25, 0.25, 0.125, 0.25, 0.125, 5.0, 0.125])
    times, ended = tt.trial_times(run_once, 4, clock=clock)
    assert times == {1: [0.25, 0.25, 5.0], 4: [0.125, 0.125]} and len(ran) == 6
    assert "a 1-thread step took 5.0 s" in ended


def test_the_bound_grows_with_a_slow_net():
    # 1 s steps: the bound is 3 s, so a 2.5 s step is no reason to stop
    assert tt.step_bound(1.0) == pytest.approx(3.0) and tt.step_bound(0.01) == 2.0
    run_once, clock, ran = _script([1.0, 1.0, 2.5, 1.0, 0.75] + [0.75] * 6)
    times, ended = tt.trial_times(run_once, 2, clock=clock)
    # (the pair's 3.5 s is past TRIAL_SECONDS: the trial ends there, as it always did)
    assert ended == "" and times == {1: [1.0], 2: [2.5]}


def test_an_unbounded_trial_is_unchanged():
    run_once, clock, ran = _script([0.0625] + [0.0625, 0.03125] * 4)
    times, ended = tt.trial_times(run_once, 2, clock=clock)
    assert ended == "" and times == {1: [0.0625] * 4, 2: [0.03125] * 4}


def test_the_choice_line_says_why_the_trial_ended(monkeypatch):
    run_once, clock, _ = _script([0.0625, 0.0625, 36.75])
    real = tt.trial_times
    monkeypatch.setattr(tt, "trial_times", lambda f, cpus: real(f, cpus, clock=clock))
    n, why = tt.timed_choice(run_once, 2)
    assert n == 1
    assert why.startswith("automatic: median step 62.5 ms at 1 thread, 36750.0 ms at 2")
    assert why.endswith("(the larger of 2 s and 3x the first step)")
