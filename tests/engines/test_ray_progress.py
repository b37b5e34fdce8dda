"""What the Ray driver says of every worker group's progress
(plugins/engines/ray/progress.py), on a fake clock: no Ray runtime. The same on a cluster:
tests/engines/ray_cluster_checks.py::test_every_groups_progress_is_shown_while_it_trains."""

from __future__ import annotations

from singa_builtins.engines.ray.progress import GroupProgress


def _progress(**kw):
    now = [0.0]
    return GroupProgress(2, 10, 100, clock=lambda: now[0], **kw), now


def test_after_group_0_finished_each_display_step_of_the_slowest_group_is_said():
    p, now = _progress()
    p.step(0, 100)
    p.step(1, 37)
    assert p.line() is None  # group 0 still trains: its own lines show progress
    p.done(0)
    assert p.line() == (
        "ray: worker group 1 is the slowest still training: step 37 of 100 (1 of 2 groups "
        "still training; group 0 finished at step 100)"
    )
    p.step(1, 39)
    assert p.line() is None
    p.step(1, 41)
    assert "step 41 of 100" in p.line()
    p.step(1, 62)  # two display steps passed between two looks: one line
    assert "step 62 of 100" in p.line() and p.line() is None
    p.done(1)
    assert p.line() is None


def test_a_silence_of_30_s_is_broken_even_without_a_display_step():
    p, now = _progress()
    p.step(0, 100)
    p.done(0)
    p.step(1, 5)
    assert "step 5 of" in p.line()
    now[0] = 29.0
    p.step(1, 6)
    assert p.line() is None
    now[0] = 30.5
    assert "step 6 of" in p.line()


def test_while_group_0_trains_a_group_far_behind_is_said_every_30_s_at_most():
    p, now = _progress()
    p.step(0, 50)
    p.step(1, 45)
    now[0] = 31.0
    assert p.line() is None  # less than a display interval behind
    p.step(1, 30)  # an older step (the steps only grow)
    p.step(0, 60)
    assert p.line() == (
        "ray: worker group 1 is the slowest still training: step 45 of 100 (2 of 2 groups "
        "still training; group 0 at step 60)"
    )
    assert p.line() is None  # not again before another 30 s
    one = GroupProgress(1, 10, 100)
    one.step(0, 5)
    assert one.line() is None  # one group: its own lines are the progress
