"""Atomic file replacement: a file is either its old complete version or its new one.

A new version of a file is written to a temp file in the same folder (so the final rename
never crosses filesystems) and published by :meth:`AtomicFile.commit`, which flushes and
fsyncs the data, renames the temp file over the final name with ``os.replace`` and fsyncs
the folder so the rename itself survives a crash. Guarantees:

* readers of the final path never see a half-written file: only the old one (or none) until
  the rename, the complete new one after it;
* when ``commit`` returns, the new content is on disk (the folder fsync is best-effort: a
  filesystem that cannot fsync folders is not an error);
* on failure or :meth:`AtomicFile.abort` the temp file is deleted and the old file is left
  as it was;
* the new file keeps the old file's permissions, or gets the umask's default for a new one;
* a failing OS call raises :class:`singa_core.contracts.errors.SingaError` naming the file
  and how to fix it, not a bare ``OSError``.
"""

from __future__ import annotations

import os
import tempfile

from singa_core.contracts.errors import SingaError


def _umask() -> int:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def fsync_dir(path) -> None:
    """Best-effort fsync of the folder ``path``, making a rename inside it durable.

    Errors (e.g. a filesystem or platform that cannot fsync a folder) are ignored.
    """
    try:
        dfd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


class AtomicFile:
    """A new version of ``path``, written to a temp file in the same folder.

    :meth:`commit` flushes, fsyncs and renames it into place with ``os.replace`` (so readers
    see either the old file or the complete new one, never a half-written one); :meth:`abort`
    deletes it. The new file gets the old file's permissions, or the umask's default.
    """

    def __init__(self, path: str, what: str) -> None:
        self.path = os.path.abspath(path)
        self.what = what
        self.aborted = False
        folder = os.path.dirname(self.path)
        if os.path.isdir(self.path):
            raise SingaError(
                f"cannot create {what} {path}: it is a folder",
                help="give the path of a file to create, not of a folder",
            )
        if not os.path.isdir(folder):
            raise SingaError(
                f"cannot create {what} {path}: folder {folder} does not exist",
                help=f"create the folder first (mkdir -p {folder})",
            )
        try:
            fd, self.tmp = tempfile.mkstemp(
                prefix=f".{os.path.basename(self.path)}.", suffix=".tmp", dir=folder
            )
        except OSError as exc:
            raise SingaError(
                f"cannot create {what} {path}: {exc.strerror or exc}",
                help=f"check that the folder {folder} is writable",
            ) from None
        try:
            mode = os.stat(self.path).st_mode & 0o777
        except OSError:
            mode = 0o666 & ~_umask()
        try:
            os.fchmod(fd, mode)
            self.file = os.fdopen(fd, "wb", buffering=1 << 20)
        except OSError as exc:
            os.close(fd)
            os.unlink(self.tmp)
            raise SingaError(
                f"cannot create {what} {path}: {exc.strerror or exc}",
                help=f"check that the folder {folder} is writable",
            ) from None

    def _failed(self, exc: OSError) -> SingaError:
        self.abort()
        return SingaError(
            f"cannot write {self.what} {self.path}: {exc.strerror or exc}",
            help="check the free disk space and the folder's permissions",
        )

    def write(self, data: bytes) -> None:
        try:
            self.file.write(data)
        except OSError as exc:
            raise self._failed(exc) from None

    def flush(self) -> None:
        try:
            self.file.flush()
        except OSError as exc:
            raise self._failed(exc) from None

    def commit(self) -> None:
        if self.aborted:
            raise SingaError(
                f"cannot finish {self.what} {self.path}: an earlier write failed and the new "
                "version was discarded (the old file, if any, is unchanged)",
                help="fix the cause of the first error and write it again",
            )
        try:
            self.file.flush()
            os.fsync(self.file.fileno())
            self.file.close()
            os.replace(self.tmp, self.path)
        except OSError as exc:
            raise self._failed(exc) from None
        fsync_dir(os.path.dirname(self.path))  # make the rename itself durable

    def abort(self) -> None:
        self.aborted = True
        try:
            self.file.close()
        except OSError:
            pass
        try:
            os.unlink(self.tmp)
        except OSError:
            pass


def atomic_write_bytes(path, data: bytes, what: str = "file") -> None:
    """Replace the file at ``path`` with ``data`` atomically, creating its folder if needed.

    ``what`` names the file in error messages (e.g. ``"checkpoint file"``). On any failure,
    including an interrupt, the temp file is removed and the old file (if any) is kept.
    """
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        raise SingaError(
            f"cannot create {what} {path}: cannot create folder {folder}: {exc.strerror or exc}",
            help="check that the folder's parent exists, is a folder and is writable",
        ) from None
    out = AtomicFile(path, what)
    try:
        out.write(data)
        out.commit()
    except BaseException:
        out.abort()
        raise
