"""The head's loss, found by the driver within seconds (not Ray's 60 s and a C++ abort).

When the head's GCS goes (``kill -9`` of ``gcs_server``, the head machine halting), Ray's
processes wait ``gcs_rpc_server_reconnect_timeout_s`` (60 s) and then abort with "Failed to
connect to GCS within 60 seconds", exit 1: no node named, no checkpoint, ``--max-restarts``
ignored. The driver's supervision loop asks :class:`HeadWatch` every pass; it opens a TCP
connection to the GCS every :data:`CHECK` seconds, and after :data:`GRACE` seconds without
one (scaled by this machine's slowdown, :func:`grace`) the job ends: :func:`head_lost`
prints the located error (the head, the newest checkpoint, ``--resume``) and leaves with
exit 2 at once, because every Ray call would now hang until Ray's own abort. A restart
cannot help: the cluster's state was in the GCS, and Ray keeps it across a GCS restart only
with GCS fault tolerance (an external Redis, ``RAY_REDIS_ADDRESS`` on the head), which
singa's recipe does not set up.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

CHECK = 1.0  # seconds between connection attempts
GRACE = 6.0  # seconds without a connection that count as the head lost
CONNECT_TIMEOUT = 1.0


def grace() -> float:
    """:data:`GRACE` scaled by this machine's slowdown (:mod:`.machine`), at most 9 s: the
    head's loss is still an exit within 15 s."""
    from singa_builtins.engines.ray.machine import scaled

    return scaled(GRACE, cap=1.5 * GRACE)


class HeadWatch:
    def __init__(self, gcs_address: str, clock=time.monotonic, grace: float | None = None) -> None:
        host, _, port = gcs_address.rpartition(":")
        self.address = gcs_address
        self.grace = globals()["grace"]() if grace is None else grace
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
        return self.lost_for() > self.grace


class HeadGuard:
    """The head watched from before ``ray.init`` to the runtime's end, in a thread of its
    own, so that its loss at any moment of start-up (joining, the node checks, the
    reservation, the actors' construction, the start gate) or training ends the job within
    seconds, whatever the main thread is blocked in: a private runtime's ``gcs_server`` (a
    process below this one) that exits is lost at once; a cluster's GCS that takes no TCP
    connection for :data:`GRACE` seconds is lost. Then the segments of this process's
    attempts on this machine are removed (:attr:`attempts`), a private runtime's processes
    killed, the located error printed, and the process exits 2 (:func:`head_lost`)."""

    def __init__(self, address: str | None, workspace, *, private: bool, restarts: int) -> None:
        self.private = private
        self.workspace = workspace
        self.restarts = restarts
        self.attempts: set[str] = set()  # attempt tokens in segment names (segments.py)
        self.address = address or ""
        # what the job was doing, for the located error (set by the driver at each stage)
        self.doing = "while this machine joined the cluster"
        self._watch = _watch_of(address) if address else None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._gcs: dict[int, float] = {}  # private: gcs_server pid -> when it was last seen

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="singa-head-guard", daemon=True)
        self._thread.start()

    def joined(self, gcs_address: str) -> None:
        """``ray.init`` returned: watch the GCS it connected to."""
        if gcs_address and (self._watch is None or self._watch.address != gcs_address):
            self.address = gcs_address
            self._watch = _watch_of(gcs_address)

    def stop(self) -> None:
        """Before the runtime is shut down on purpose (which ends a private GCS)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        me = os.getpid()
        # Ray's ray.init holds the interpreter while it waits for its GCS (a private
        # runtime's port file: Runtime bounds that wait and looks itself); from its return
        # on this thread sees every moment
        while not self._stop.wait(0.1 if self.private and not self._watch else CHECK / 2):
            down = self.private_down(me) if self.private else None
            watch = self._watch
            if down is None and watch is not None and watch.lost():
                down = watch.lost_for()
            if down is not None and not self._stop.is_set():
                self._lost(down)

    def private_down(self, me: int | None = None) -> float | None:
        """Seconds since the private runtime's ``gcs_server`` (a process below this one)
        exited or became a zombie; None while it runs or before it exists."""
        now = time.monotonic()
        alive = set()
        for pid in descendants(os.getpid() if me is None else me):
            if _comm(pid) == "gcs_server":
                if _state(pid) in ("Z", "X", ""):
                    self._gcs.setdefault(pid, now)
                else:
                    alive.add(pid)
        for pid in alive:
            self._gcs[pid] = now
        gone = [t for pid, t in self._gcs.items() if pid not in alive]
        return now - max(gone) if gone else None

    def _lost(self, down: float) -> None:
        from singa_builtins.engines.ray.segments import unlink_attempt

        for attempt in list(self.attempts):  # what Ray can no longer be asked to remove
            unlink_attempt(attempt)
        head_lost(self.address, down, self.workspace, private=self.private,
                  restarts=self.restarts, doing=self.doing)  # fmt: skip


def _watch_of(address: str) -> HeadWatch | None:
    if address.startswith("ray://") or ":" not in address:
        return None  # a client address, or "auto": watched once ray.init has resolved it
    try:
        return HeadWatch(address)
    except ValueError:
        return None


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def head_lost_message(address: str, down: float, workspace, private: bool, restarts: int,
                      doing: str = "") -> str:  # fmt: skip
    from singa_builtins.engines.shm.launcher import stopped_error

    head = "the private Ray runtime's GCS" if private else f"the head node (its GCS at {address})"
    text = f"lost {head}{' ' + doing if doing else ''}: no connection for {down:.0f} s"
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


def head_lost(address: str, down: float, workspace, *, private: bool, restarts: int,
              doing: str = "") -> None:  # fmt: skip
    """Print the located error (what the job was ``doing``: "while the job trained") and
    end the process with exit 2 now (after ending the private runtime's processes this
    process started)."""
    print(head_lost_message(address, down, workspace, private, restarts, doing),
          file=sys.stderr)  # fmt: skip
    sys.stderr.flush()
    if private:
        end_descendants()
    os._exit(2)


def end_descendants(rounds: int = 5) -> None:
    """SIGKILL every process below this one: each round stops them all first (so none
    starts another, as a raylet starts workers, or is orphaned out of reach), then kills."""
    for _ in range(rounds):
        pids = descendants(os.getpid())
        if not pids:
            return
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
        time.sleep(0.05)


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
