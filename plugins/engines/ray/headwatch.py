"""The head's loss, found by the driver within seconds (not Ray's 60 s and a C++ abort).

When the head's GCS goes (``kill -9`` of ``gcs_server``, the head machine halting), Ray's
processes wait ``gcs_rpc_server_reconnect_timeout_s`` (60 s) and then abort with "Failed to
connect to GCS within 60 seconds", exit 1: no node named, no checkpoint, ``--max-restarts``
ignored. The driver's supervision loop asks :class:`HeadWatch` every pass; it opens a TCP
connection to the GCS every :data:`CHECK` seconds, and after :data:`GRACE` seconds without
one the job ends: :func:`head_lost` prints the located error (the head, the newest
checkpoint, ``--resume``) and leaves with exit 2 at once, because every Ray call would now
hang until Ray's own abort. A restart cannot help: the cluster's state was in the GCS, and
Ray keeps it across a GCS restart only with GCS fault tolerance (an external Redis,
``RAY_REDIS_ADDRESS`` on the head), which singa's recipe does not set up.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from pathlib import Path

CHECK = 1.0  # seconds between connection attempts
GRACE = 6.0  # seconds without a connection that count as the head lost
CONNECT_TIMEOUT = 1.0


class HeadWatch:
    def __init__(self, gcs_address: str, clock=time.monotonic) -> None:
        host, _, port = gcs_address.rpartition(":")
        self.address = gcs_address
        self.host, self.port = host.strip("[]"), int(port)
        self.clock = clock
        self.last_ok = clock()
        self.next_check = 0.0

    def reachable(self) -> bool:
        try:
            with socket.create_connection((self.host, self.port), timeout=CONNECT_TIMEOUT):
                return True
        except OSError:
            return False

    def lost_for(self) -> float:
        """Seconds the GCS has not answered (0 while it does); checks at most every CHECK s."""
        now = self.clock()
        if now >= self.next_check:
            self.next_check = now + CHECK
            if self.reachable():
                self.last_ok = now
        return now - self.last_ok

    def lost(self) -> bool:
        return self.lost_for() > GRACE


def head_lost_message(address: str, down: float, workspace, private: bool, restarts: int) -> str:
    from singa_builtins.engines.shm.launcher import stopped_error

    head = "the private Ray runtime's GCS" if private else f"the head node (its GCS at {address})"
    text = f"lost {head}: no connection for {down:.0f} s"
    if restarts:
        text += (
            f"; --max-restarts {restarts} cannot survive the head's loss (the cluster's state "
            "was in the GCS; Ray keeps it only with GCS fault tolerance, an external Redis on "
            "the head, which is not configured)"
        )
    err = stopped_error(workspace, text)
    err.help = (err.help or "") + (
        "; restart the head (and the nodes) first" if not private else ""
    )
    return err.format()


def head_lost(address: str, down: float, workspace, *, private: bool, restarts: int) -> None:
    """Print the located error and end the process with exit 2 now (after ending the
    private runtime's processes this process started)."""
    print(head_lost_message(address, down, workspace, private, restarts), file=sys.stderr)
    sys.stderr.flush()
    if private:
        for pid in descendants(os.getpid()):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    os._exit(2)


def descendants(root: int) -> list[int]:
    """The pids of every process below ``root`` (from /proc)."""
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out
