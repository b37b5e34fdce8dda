"""Checks that a path named in a job (workspace, checkpoint files, store files) is of the
right kind before anything is read from or written to it.

Each function returns ``None`` when the path is usable, else a short phrase saying what is
wrong ("is a folder", "its parent /etc/passwd is not a folder"); the caller turns it into a
:class:`~singa_core.contracts.errors.SingaError` located at the config field that named the path.
Nothing is created or opened here (a ``--dry-run`` leaves the disk as it was).
"""

from __future__ import annotations

import os
import stat


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _stat(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except (OSError, ValueError):  # ValueError: an embedded NUL byte
        return None


def _nearest_existing(path: str) -> tuple[str, os.stat_result | None]:
    """The path's nearest ancestor (or itself) that exists, and its stat."""
    cur = os.path.abspath(path)
    while True:
        st = _stat(cur)
        if st is not None or os.path.dirname(cur) == cur:
            return cur, st
        cur = os.path.dirname(cur)


def bad_path_text(path: str) -> str | None:
    if not path:
        return "is empty"
    if "\x00" in path:
        return "contains a NUL character"
    if len(os.fsencode(path)) > 4096 or any(len(os.fsencode(p)) > 255 for p in path.split(os.sep)):
        return "is too long for the filesystem"
    return None


def readable_file_problem(path: str, *, folder_ok: bool = False) -> str | None:
    """Problem of a file to read (or, with ``folder_ok``, a folder); None if it is fine.
    A missing path is reported as ``"does not exist"``."""
    bad = bad_path_text(path)
    if bad:
        return bad
    st = _stat(path)
    if st is None:
        return "does not exist"
    if stat.S_ISDIR(st.st_mode):
        if folder_ok:
            return None if os.access(path, os.R_OK | os.X_OK) else "is a folder that cannot be read"
        return "is a folder, not a file"
    if not stat.S_ISREG(st.st_mode):
        return f"is {_kind(st.st_mode)}, not a file"
    if not os.access(path, os.R_OK):
        return "cannot be read (permission denied)"
    return None


def writable_file_problem(path: str) -> str | None:
    """Problem of a file to create or replace; None if it can be written."""
    bad = bad_path_text(path)
    if bad:
        return bad
    st = _stat(path)
    if st is not None and not stat.S_ISREG(st.st_mode):
        return f"is {_kind(st.st_mode)}, not a file"
    return writable_folder_problem(os.path.dirname(os.path.abspath(path)), what="its folder")


def writable_folder_problem(path: str, *, what: str = "it") -> str | None:
    """Problem of a folder to write into (created if missing); None if that will work."""
    bad = bad_path_text(path)
    if bad:
        return bad
    existing, st = _nearest_existing(path)
    own = os.path.abspath(path) == existing
    subject = what if own else f"its parent {existing}"
    if st is None:
        return f"{subject} cannot be examined"
    if not stat.S_ISDIR(st.st_mode):
        return f"{subject} is {'a file' if stat.S_ISREG(st.st_mode) else _kind(st.st_mode)}" + (
            ", not a folder" if stat.S_ISREG(st.st_mode) else ""
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{subject} is not writable"
    return None
