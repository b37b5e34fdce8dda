"""One run per workspace: a lock held for the run's life, and no silent checkpoint mix.

:class:`WorkspaceLock` takes an exclusive ``flock`` on ``WORKSPACE/.singa.lock`` (a file
that is never replaced or deleted, so every run locks the same inode). The operating system
releases it when the process ends however it ends (exit, exception, SIGKILL), so a stale
lock never blocks a new run. Who holds it (pid, host, start time, command) is written
atomically beside it, to ``WORKSPACE/.singa.lock.json``, after the lock is taken; a
second run that finds the lock held exits 2 naming the holder and what to do.

Everything a run does to the workspace before training (removing temporary files that a
killed run left, moving an earlier run's checkpoints aside) happens only while it holds
the lock, so it never touches the files of a live run.

:func:`move_aside_old_checkpoints`: a new run (not ``--resume``) in a workspace that holds
an earlier run's checkpoints renames ``WORKSPACE/checkpoint`` to
``WORKSPACE/checkpoint.before-<time>`` (kept whole, nothing deleted), so the workspace's
``checkpoint`` folder only ever holds one run's steps and ``--resume`` continues that run.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

from singa_core.contracts.errors import SingaError
from singa_core.running.fileio import atomic_write_bytes, not_a_file_problem, read_regular_text

LOCK_NAME = ".singa.lock"
INFO_NAME = ".singa.lock.json"


def _holder_text(info: dict | None) -> str:
    if not info:
        return "another process (it has not recorded itself yet)"
    started = info.get("started")
    when = (
        time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started))
        if isinstance(started, (int, float))
        else "an unknown time"
    )
    cmd = info.get("command")
    return f"pid {info.get('pid', '?')} on host {info.get('host', '?')}, started {when}" + (
        f" ({cmd})" if cmd else ""
    )


def read_holder(workspace: str | Path) -> dict | None:
    """What the holder of the workspace's lock recorded about itself, or None."""
    try:
        doc = json.loads(read_regular_text(Path(workspace) / INFO_NAME, "lock record"))
    except (OSError, ValueError, SingaError):  # a FIFO there: no record, never a wait
        return None
    return doc if isinstance(doc, dict) else None


class WorkspaceLock:
    """An exclusive lock on a workspace for the life of a run (see the module docstring).

    ``acquire`` raises :class:`SingaError` (exit 2) when another process holds it. A
    filesystem without ``flock`` support (some network filesystems) gets a note on
    ``err`` and runs unlocked.
    """

    def __init__(self, workspace: str | Path) -> None:
        self.workspace = Path(workspace)
        self.fd: int | None = None
        self.note: str | None = None

    @property
    def path(self) -> Path:
        return self.workspace / LOCK_NAME

    def acquire(self, what: str = "singa train") -> WorkspaceLock:
        import fcntl

        try:
            self.workspace.mkdir(parents=True, exist_ok=True)
            # O_NONBLOCK: a FIFO in the lock's place is refused below, never waited on
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NONBLOCK, 0o644)
        except OSError as exc:
            raise SingaError(
                f"cannot create the workspace lock {self.path}: {exc.strerror or exc}",
                where=str(self.workspace),
                help="choose a workspace folder that exists or can be created and is writable",
            ) from None
        problem = not_a_file_problem(os.fstat(fd).st_mode)
        if problem is not None:
            os.close(fd)
            raise SingaError(
                f"workspace lock {self.path} {problem}",
                where=str(self.path),
                help="singa locks a workspace with a regular file of that name; remove what "
                "is there (no run of singa's made it)",
            )
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            holder = read_holder(self.workspace)
            raise SingaError(
                f"workspace {self.workspace} is in use by another run: {_holder_text(holder)}",
                where=str(self.workspace),
                notes=[f"its lock is {self.path}; it is released when that process ends"],
                help="wait for that run to finish (or stop it: kill -TERM "
                f"{(holder or {}).get('pid', 'PID')}, it checkpoints and exits), or give "
                "this run its own workspace (--workspace DIR)",
            ) from None
        except OSError as exc:  # ENOLCK/EOPNOTSUPP: the filesystem cannot lock
            self.note = (
                f"note: cannot lock workspace {self.workspace} ({exc.strerror or exc}); "
                "make sure no other run uses it"
            )
            os.close(fd)
            return self
        self.fd = fd
        info = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": round(time.time(), 3),
            "command": what or " ".join(["singa", *sys.argv[1:]])[:300],
        }
        atomic_write_bytes(
            self.workspace / INFO_NAME,
            (json.dumps(info, sort_keys=True) + "\n").encode(),
            "workspace lock record",
        )
        return self

    def release(self) -> None:
        if self.fd is None:
            return
        try:  # the record first: a record never names a process that no longer holds it
            (self.workspace / INFO_NAME).unlink()
        except OSError:
            pass
        try:
            os.close(self.fd)  # closing the only descriptor releases the flock
        finally:
            self.fd = None

    def __enter__(self) -> WorkspaceLock:
        return self.acquire() if self.fd is None else self

    def __exit__(self, *exc) -> None:
        self.release()


def move_aside_old_checkpoints(workspace: str | Path, keep_files=()) -> Path | None:
    """Rename ``WORKSPACE/checkpoint`` (an earlier run's steps) to
    ``checkpoint.before-<YYYYmmdd-HHMMSS>`` before a new run writes its own; returns the
    new folder (None when there was nothing to move). ``keep_files``: paths the new run
    still reads (its ``checkpoint_path``); the caller maps them to the new folder."""
    from singa_core.running.checkpoint import checkpoint_dir, checkpoint_steps

    d = checkpoint_dir(workspace)
    if not d.is_dir() or not checkpoint_steps(workspace):
        return None
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = d.with_name(f"checkpoint.before-{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = d.with_name(f"checkpoint.before-{stamp}-{n}")
    try:
        os.rename(d, target)
    except OSError as exc:
        raise SingaError(
            f"cannot move the earlier run's checkpoints aside: {exc.strerror or exc}",
            where=str(d),
            help="a new run does not mix its checkpoints with an earlier run's: continue that "
            "run with --resume, or move or delete the folder yourself",
        ) from None
    return target


def remap_into(path: str, old: Path, new: Path) -> str:
    """``path`` with the folder ``old`` replaced by ``new`` when it lies inside ``old``."""
    p = Path(os.path.abspath(path))
    try:
        rel = p.relative_to(os.path.abspath(old))
    except ValueError:
        return path
    return str(Path(os.path.abspath(new)) / rel)
