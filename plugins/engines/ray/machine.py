"""How loaded this machine is, as its own start-up shows, and the bounded waits of the Ray
paths scaled by it.

A wait that decides "the cluster (or a process) is gone" must not decide it on a loaded
machine whose processes are merely slow: at load 40 on 2 cores a ``singa`` command takes
several times as long to start as on an idle machine, and so do the GCS's answers, a node's
task, an actor's reply. singa measures the slowdown once per process, the first time a Ray
path asks (:func:`measure`, called as the runtime or the console starts): the wall-clock
seconds since this process started over the CPU seconds it used in that time, over that
ratio on an idle machine (:data:`IDLE`: starting up, Python, the imports and reading the
job, is mostly CPU work; measured here 1.0-1.7). It grows with the run queue: on a 2-core
machine 1 with up to two busy processes, 2.3-2.5 with six, 3.6-3.9 with ten, the clamp of
:data:`CAP` with sixteen. Every bounded wait of the Ray paths is its nominal value times
that slowdown (:func:`scaled`), up to a cap of its own, which every wait below reaches at a
slowdown of 6 or less: the clamp never shortens a wait, it only keeps a long-lived process
(whose age is mostly idle time when it first asks) from reading that as load.

* joining and the console: the TCP connection to the GCS and its answer
  (:mod:`.auth`), the node list before joining (:mod:`.membership`), every registry call
  (:mod:`.registry`);
* the head guard and the watcher of ``ray.init`` (:mod:`.headwatch`, :mod:`.initwatch`):
  6 s without a connection, up to 9 s;
* the driver's grace for a process that reported an error or a lost peer, and its probes of
  the processes that should still answer (:data:`.driver.LOST_GRACE`, up to 15 s);
* on a restart, the wait for a node that just lost a process before it is left out, and the
  wait for the nodes' clean-up tasks (:mod:`.nodecheck`: 10 s up to 30 s, 5 s up to 15 s).

A connection to a live GCS is accepted by the kernel whatever the load, so only the waits
for answers grow much; the start-up deadline (``--startup-timeout``) is the user's own.
"""

from __future__ import annotations

import os

CAP = 10.0  # the most a wait is scaled by
IDLE = 1.5  # wall over CPU seconds of a `singa` command's start-up on an idle machine
_measured: tuple[float, float] | None = None  # (seconds since this process started, slowdown)


def _clock_ticks() -> float:
    try:
        return float(os.sysconf("SC_CLK_TCK"))
    except (ValueError, OSError, AttributeError):
        return 100.0


def process_age() -> float | None:
    """Seconds since this process started (Linux /proc), None elsewhere."""
    try:
        with open("/proc/self/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime") as fh:
            uptime = float(fh.read().split()[0])
    except (OSError, IndexError, ValueError):
        return None
    return max(0.0, uptime - int(fields[19]) / _clock_ticks())


def measure() -> tuple[float, float]:
    """(this process's start-up so far in seconds, its slowdown: wall over CPU time, at
    least 1, at most :data:`CAP`), measured at the first call and kept."""
    global _measured
    if _measured is None:
        age = process_age()
        times = os.times()
        cpu = times.user + times.system
        if age is None or cpu <= 0.05:
            _measured = (age or 0.0, 1.0)
        else:
            _measured = (age, min(CAP, max(1.0, age / cpu / IDLE)))
    return _measured


def slowdown() -> float:
    return measure()[1]


def scaled(seconds: float, cap: float | None = None) -> float:
    """``seconds`` times this machine's slowdown, at most ``cap`` when given."""
    out = seconds * slowdown()
    return min(out, cap) if cap is not None else out
