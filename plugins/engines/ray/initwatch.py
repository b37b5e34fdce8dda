"""The head lost while this machine joins the cluster, inside ``ray.init``.

``ray.init(address=HEAD)`` holds the interpreter (the GIL) while its core worker registers
with the node's raylet; when the head's GCS dies in that window the raylet retries the GCS
for 60 s and the driver waits with it, then dies with Ray's "Failed to register worker to
Raylet", exit 1 (measured, Ray 2.60: no thread of the driver ran in those 60 s). No thread
of the driver can act then, so for that window (about a second) a small watcher *process*
does: it opens a TCP connection to the GCS every second and, after
:data:`~.headwatch.GRACE` seconds without one, prints the located error the driver
prepared (the head's address, what was happening, the newest checkpoint and the command
that resumes) and sends the driver SIGINT, whose handler during the window is the C
library's ``_exit``: the driver ends with exit 2 at once, whatever holds its interpreter.
Nothing of the job has started then (no actor, no segment). The driver closes the
watcher's stdin when ``ray.init`` returns (or raises); the watcher then ends.

A Ctrl-C in that window therefore also ends the driver with exit 2 (not 130); the watcher,
in the same process group, says "interrupted while joining".
"""

from __future__ import annotations

import ctypes
import signal
import subprocess
import sys

WATCHER = r"""
import os, select, signal, socket, sys, time
host, port, grace = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
message, interrupted = sys.argv[4], sys.argv[5]
driver = os.getppid()
got = []
signal.signal(signal.SIGINT, lambda *a: got.append(1))
signal.signal(signal.SIGTERM, signal.SIG_IGN)
last_ok = time.monotonic()
while True:
    try:
        ready = select.select([sys.stdin], [], [], 1.0)[0]
    except InterruptedError:
        ready = []
    if ready or os.getppid() != driver:  # joined (or failed on its own), or the driver is gone
        if os.getppid() != driver and got:
            sys.stderr.write(interrupted + "\n")
        sys.exit(0)
    try:
        socket.create_connection((host, port), timeout=1.0).close()
        last_ok = time.monotonic()
    except OSError:
        pass
    down = time.monotonic() - last_ok
    if down > grace:
        sys.stderr.write(message.replace("{down}", f"{down:.0f}") + "\n")
        sys.stderr.flush()
        os.kill(driver, signal.SIGINT)
        end = time.monotonic() + 3
        while os.getppid() == driver and time.monotonic() < end:
            time.sleep(0.05)
        if os.getppid() == driver:
            os.kill(driver, signal.SIGKILL)
        sys.exit(0)
"""


def _libc_exit_handler():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.signal.restype = ctypes.c_void_p
    libc.signal.argtypes = (ctypes.c_int, ctypes.c_void_p)
    return libc, ctypes.cast(libc._exit, ctypes.c_void_p)


class InitWatch:
    """The watcher of one ``ray.init`` (a context manager, see the module)."""

    def __init__(self, gcs_address: str, message: str, interrupted: str, grace: float) -> None:
        host, _, port = gcs_address.rpartition(":")
        self.host, self.port = host.strip("[]"), port
        self.message, self.interrupted, self.grace = message, interrupted, grace
        self.proc: subprocess.Popen | None = None
        self._old = None

    def __enter__(self) -> InitWatch:
        sys.stdout.flush()
        sys.stderr.flush()
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-c", WATCHER, self.host, self.port, str(self.grace),
             self.message, self.interrupted],
            stdin=subprocess.PIPE, close_fds=True,
        )  # fmt: skip
        self._old = signal.getsignal(signal.SIGINT)
        libc, exit_ = _libc_exit_handler()
        libc.signal(signal.SIGINT, exit_)  # exit status 2 = SIGINT's number
        try:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, (signal.SIGINT,))
        except (AttributeError, OSError, ValueError):
            pass
        return self

    def __exit__(self, *exc) -> None:
        try:
            signal.pthread_sigmask(signal.SIG_BLOCK, (signal.SIGINT,))
        except (AttributeError, OSError, ValueError):
            pass
        signal.signal(signal.SIGINT, self._old if self._old is not None else signal.SIG_DFL)
        if self.proc is not None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
