"""The slowdown singa measures from a process's own start-up (plugins/engines/ray/machine.py)
under an artificial load (issue 44 point 8): busy processes (spin loops this test starts
and kills by pid), three per core. A fresh process must see the load (a slowdown well
above 1), every bounded wait of the Ray paths must be its nominal value times that
slowdown up to its own cap (which it reaches below the slowdown's clamp), and the head
guard watching a live GCS port for longer than its grace must never call it lost. Run
inside a private network namespace (loopback only), where the "GCS" is a listening socket
of the check itself."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO, busy_processes

pytestmark = pytest.mark.slow

CHECK = r"""
import json, socket, time
import singa_core.commands.cli  # a `singa` command's start-up
from singa_builtins.engines.ray import auth, driver, headwatch, machine, nodecheck, registry
age, slowdown = machine.measure()
waits = {
    "connect": (auth.CONNECT_TIMEOUT, 15.0), "answer": (auth.ANSWER_TIMEOUT, 60.0),
    "registry": (registry.TIMEOUT, 60.0), "lost_grace": (driver.LOST_GRACE, 15.0),
    "head_guard": (headwatch.GRACE, 1.5 * headwatch.GRACE),
    "suspect": (nodecheck.SUSPECT_WAIT, 30.0), "cleanup": (nodecheck.CLEANUP_WAIT, 15.0),
}
scaled = {k: [n, cap, machine.scaled(n, cap)] for k, (n, cap) in waits.items()}
gcs = socket.socket()
gcs.bind(("127.0.0.1", 0))
gcs.listen(64)
watch = headwatch.HeadWatch(f"127.0.0.1:{gcs.getsockname()[1]}")
lost, t0 = [], time.monotonic()
while time.monotonic() - t0 < watch.grace + 3:
    if watch.lost():
        lost.append(round(watch.lost_for(), 1))
    time.sleep(0.2)
print(json.dumps({"age": age, "slowdown": slowdown, "grace": watch.grace, "scaled": scaled,
                  "lost": lost, "clamp": machine.CAP}))
"""


def test_a_loaded_machine_sees_its_load_and_a_live_head_is_never_lost():
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs unshare and root for a private network namespace")
    with busy_processes(3 * (os.cpu_count() or 1)) as busy:
        res = subprocess.run(
            ["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$0" -c "$1"',
             sys.executable, CHECK],
            cwd=REPO, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        load = os.getloadavg()[0]
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    print(f"{len(busy)} busy processes, load {load:.1f}: start-up {out['age']:.2f} s, "
          f"slowdown {out['slowdown']:.2f}, head guard's grace {out['grace']:.1f} s")  # fmt: skip
    assert out["slowdown"] > 1.5, out  # the load is seen
    for name, (nominal, cap, got) in out["scaled"].items():
        assert got == pytest.approx(min(nominal * out["slowdown"], cap)), (name, out)
        assert nominal <= got <= cap, (name, out)
        # the clamp never shortens a wait: each reaches its own cap below it (machine.py)
        assert nominal * out["clamp"] >= cap, (name, out)
    assert out["lost"] == [], out  # a live GCS port is never a lost head
