"""The fuzz suite's per-case hang guard (fuzzing.time_limit) counts the CPU time a case
uses, not the wall-clock time it takes, so a loaded machine does not fail a case that would
pass on an idle one; a case that waits without computing is caught by the wall-clock
backstop."""

from __future__ import annotations

import time

import pytest
from fuzzing import Hang, cpu_seconds, time_limit


def _spin(seconds: float) -> None:
    end = cpu_seconds() + seconds
    while cpu_seconds() < end:
        pass


def test_a_case_computing_too_long_is_a_hang():
    with pytest.raises(Hang, match="CPU time"), time_limit(0.2):
        _spin(5.0)


def test_time_the_case_spends_off_the_cpu_does_not_count():
    # what a loaded machine does to a case: it waits for a core. Sleeping stands for that
    # wait; the old wall-clock guard (SIGALRM after `seconds`) failed this case.
    with time_limit(0.2):
        time.sleep(0.6)
        _spin(0.05)


def test_a_case_that_waits_forever_is_caught_by_the_wall_clock_backstop():
    with pytest.raises(Hang, match="wall clock"), time_limit(0.1, wall_factor=3):
        time.sleep(5)


def test_the_timers_are_cleared_after_the_block():
    with time_limit(0.2):
        _spin(0.01)
    _spin(0.3)  # no SIGPROF left armed
    time.sleep(0.3)  # no SIGALRM left armed
