"""File helpers shared by the built-in stores: read-only mapping and atomic replacement."""

from __future__ import annotations

import mmap
import os
import tempfile

from singa_core.errors import SingaError


def map_file(path: str, what: str) -> tuple[object, object | None]:
    """The whole file at ``path`` as a read-only buffer: ``(buffer, mmap or None)``.

    Large files are memory-mapped (pages load on first touch); an empty file gives ``b""``.
    Slicing the buffer returns ``bytes``. Close the returned mmap when done.
    """
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size == 0:
                return b"", None
            mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as exc:
        raise SingaError(
            f"cannot open {what} {path}: {exc.strerror or exc}",
            help="check that the file is readable",
        ) from None
    return mm, mm


def _umask() -> int:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


class AtomicFile:
    """A new version of ``path``, written to a temp file in the same folder.

    :meth:`commit` flushes, fsyncs and renames it into place with ``os.replace`` (so readers
    see either the old file or the complete new one, never a half-written one); :meth:`abort`
    deletes it. The new file gets the old file's permissions, or the umask's default.
    """

    def __init__(self, path: str, what: str) -> None:
        self.path = os.path.abspath(path)
        self.what = what
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
        os.fchmod(fd, mode)
        self.file = os.fdopen(fd, "wb", buffering=1 << 20)

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
        try:
            self.file.flush()
            os.fsync(self.file.fileno())
            self.file.close()
            os.replace(self.tmp, self.path)
        except OSError as exc:
            raise self._failed(exc) from None
        try:  # make the rename itself durable
            dfd = os.open(os.path.dirname(self.path), os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except OSError:
            pass

    def abort(self) -> None:
        try:
            self.file.close()
        except OSError:
            pass
        try:
            os.unlink(self.tmp)
        except OSError:
            pass


def as_bytes(data, what: str) -> bytes:
    """``data`` (bytes-like, or str encoded as UTF-8) as bytes."""
    if isinstance(data, bytes):
        return data
    if isinstance(data, str):
        return data.encode("utf-8")
    if isinstance(data, bytearray | memoryview):
        return bytes(data)
    raise TypeError(f"store {what} must be bytes or str, got {type(data).__name__}")
