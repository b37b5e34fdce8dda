"""What a private runtime's ray.shutdown leaves is ended by pid (plugins/engines/ray/
runtime.py: process_tree after ray.init, ray_tree before the shutdown, end_leftovers
after): a process that was in the tree when it was taken and was orphaned since (a
runtime-env agent whose raylet was killed) is still ended, one that ignores SIGTERM gets
SIGKILL, and what ran before ray.init or was started by the program after it is left
alone. The private runtime itself: ray_cluster_checks.py and the emulated
machines (test_ray_machines.py::test_b2)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from singa_builtins.engines.ray.headwatch import descendants
from singa_builtins.engines.ray.runtime import _running, end_leftovers, process_tree, ray_tree

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")

# a parent that starts a child ignoring SIGTERM, prints the child's pid and waits
AGENT = (
    "import signal, subprocess, sys, time\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import signal, time; "
    "signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True); time.sleep(120)'],"
    " stdout=subprocess.PIPE, text=True)\n"
    "child.stdout.readline()\n"
    "print(child.pid, flush=True)\n"
    "time.sleep(120)\n"
)


def test_an_orphaned_process_of_the_tree_is_ended_and_earlier_ones_are_kept():
    earlier = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        before = set(descendants(os.getpid()))
        raylet = subprocess.Popen([sys.executable, "-c", AGENT], stdout=subprocess.PIPE, text=True)
        agent = int(raylet.stdout.readline())
        roots = process_tree(before)  # what "ray.init" started
        assert set(roots) == {raylet.pid, agent}
        # started by the program itself after "ray.init": not the runtime's
        later = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        tree = ray_tree(roots)  # before "ray.shutdown"
        assert set(tree) == {raylet.pid, agent}
        raylet.kill()  # as a kill -9 of the raylet: its agent is orphaned
        raylet.wait()
        assert agent not in descendants(os.getpid()) and _running(agent)
        t0 = time.monotonic()
        ended = end_leftovers(tree, roots, grace=0.5)
        assert agent in ended and later.pid not in ended
        assert later.poll() is None
        deadline = time.monotonic() + 5
        while _running(agent) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _running(agent), "the orphaned agent (SIGTERM ignored) still runs"
        assert time.monotonic() - t0 < 5
        assert earlier.poll() is None  # there before ray.init: not touched
        later.kill()
        later.wait()
    finally:
        earlier.kill()
        earlier.wait()
        for pid in descendants(os.getpid()):
            with contextlib.suppress(ProcessLookupError):  # one may end meanwhile
                os.kill(pid, signal.SIGKILL)
