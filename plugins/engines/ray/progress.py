"""Every worker group's progress, as the driver shows it.

Only group 0's worker 0 reports to the Reporter (its display, test and validation lines),
as in SINGA 0.3. With several worker groups (Downpour, Hogwild) the others may lag: a group
on a slower node, or every other group once group 0 has finished its last test. Worker 0 of
each group notes its step after every step in its process (no message of its own); each
answer of the process's ``events`` long poll carries the steps that changed (so the driver
knows them within :data:`~.driver.POLL` seconds). The driver then says, on stderr, which
group is the slowest still training and at which step:

* once group 0 has finished: each time that group passes a display step (a multiple of
  ``disp_freq``), and at least every :data:`EVERY` seconds;
* while group 0 trains (its own lines show its progress): at most every :data:`EVERY`
  seconds, and only when the slowest group is a display interval or more behind it.
"""

from __future__ import annotations

import time

EVERY = 30.0  # seconds: the longest silence while a group still trains


class GroupProgress:
    def __init__(self, ngroups: int, disp_freq: int, total: int, start: int = 0,
                 every: float = EVERY, clock=time.monotonic) -> None:  # fmt: skip
        self.ngroups = ngroups
        self.disp = max(int(disp_freq), 0)
        self.total = total
        self.steps = dict.fromkeys(range(ngroups), start)
        self.ended: set[int] = set()
        self.every = every
        self.clock = clock
        self.last_time = clock()  # the last line (or the start)
        self.last_step: int | None = None  # the slowest group's step in the last line

    def step(self, group: int, step: int) -> None:
        if group in self.steps:
            self.steps[group] = max(self.steps[group], int(step))

    def done(self, group: int) -> None:
        self.ended.add(group)

    def line(self) -> str | None:
        """The line to show now, or None."""
        training = [g for g in range(self.ngroups) if g not in self.ended]
        if self.ngroups < 2 or not training:
            return None
        slowest = min(training, key=lambda g: (self.steps[g], g))
        step = self.steps[slowest]
        now = self.clock()
        quiet = now - self.last_time >= self.every
        if 0 in self.ended:
            # the first line at once, then one per display step the slowest group passes
            crossed = self.last_step is None or (
                self.disp > 0 and step // self.disp > self.last_step // self.disp
            )
            if not (crossed or quiet):
                return None
            lead = f"group 0 finished at step {self.steps[0]}"
        else:
            behind = self.steps[0] - step
            if not quiet or behind < max(self.disp, 1):
                return None
            lead = f"group 0 at step {self.steps[0]}"
        self.last_time, self.last_step = now, step
        return (
            f"ray: worker group {slowest} is the slowest still training: step {step} of "
            f"{self.total} ({len(training)} of {self.ngroups} groups still training; {lead})"
        )
