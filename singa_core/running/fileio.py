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
  and how to fix it, not a bare ``OSError``;
* only a regular file is ever replaced: an existing target that is a device (``/dev/null``,
  ``/dev/full``), a FIFO, a socket or a folder is refused (:func:`output_target`), and a
  symlink is written through: its target gets the new content, the link stays a link.

Every file singa writes goes through here (checkpoints, exports, predictions, converted
stores, plots, graphs, metrics.jsonl's rewrites); metrics.jsonl's appends check their target
with :func:`output_target` first.
"""

from __future__ import annotations

import os
import stat
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


_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
)


def output_target(path, what: str = "file") -> str:
    """The absolute path a new version of ``path`` must be written to: ``path`` itself, or,
    when ``path`` is a symlink (or a chain of them), the file it points to, so that writing
    keeps the link. Raises a SingaError when that target exists and is not a regular file
    (a folder, a device such as /dev/null or /dev/full, a FIFO, a socket): replacing it
    would destroy it."""
    shown = os.fspath(path)
    target = os.path.realpath(os.path.abspath(shown))
    try:
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        return target  # nothing there yet (or a dangling link: its target is created)
    except OSError as exc:
        raise SingaError(
            f"cannot write {what} {shown}: {exc.strerror or exc}",
            where=shown,
            help="give a path whose folder exists and is readable (and a file name the "
            "filesystem allows: at most 255 bytes)",
        ) from None
    if stat.S_ISREG(mode):
        return target
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    via = f" (the symlink {shown} points to {target})" if target != os.path.abspath(shown) else ""
    if stat.S_ISDIR(mode):
        help_ = "give the path of a file to create inside it, not the folder itself"
    else:
        help_ = (
            "singa writes only regular files (a new file, or a new version of one) and never "
            "replaces anything else; give the path of a file"
        )
    raise SingaError(f"cannot write {what} {shown}: it is {kind}{via}", where=shown, help=help_)


class AtomicFile:
    """A new version of ``path``, written to a temp file in the same folder.

    :meth:`commit` flushes, fsyncs and renames it into place with ``os.replace`` (so readers
    see either the old file or the complete new one, never a half-written one); :meth:`abort`
    deletes it. The new file gets the old file's permissions, or the umask's default.
    """

    def __init__(self, path: str, what: str) -> None:
        # a symlink is written through (the link stays); a device, FIFO, socket or folder
        # is refused
        self.path = output_target(path, what)
        self.what = what
        self.aborted = False
        folder = os.path.dirname(self.path)
        if not os.path.isdir(folder):
            raise SingaError(
                f"cannot create {what} {path}: folder {folder} does not exist",
                where=str(path),
                help=f"create the folder first (mkdir -p {folder})",
            )
        try:
            fd, self.tmp = tempfile.mkstemp(
                prefix=f".{os.path.basename(self.path)}.", suffix=".tmp", dir=folder
            )
        except OSError as exc:
            raise SingaError(
                f"cannot create {what} {path}: {exc.strerror or exc}",
                where=str(path),
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
            where=self.path,
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
            output_target(self.path, self.what)  # still a regular file (or nothing)?
            os.replace(self.tmp, self.path)
        except OSError as exc:
            raise self._failed(exc) from None
        except SingaError:
            self.abort()
            raise
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
    folder = os.path.dirname(output_target(path, what))
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


def not_a_file_problem(mode: int) -> str | None:
    """What is wrong with a path of this ``st_mode`` as a file to read: None for a regular
    file, else the phrase every refusal uses ("is a named pipe, not a file")."""
    if stat.S_ISREG(mode):
        return None
    from singa_core.running.paths import _kind

    return f"is {_kind(mode)}, not a file"


def open_regular(path, what: str = "file", *, text: bool = False, buffering: int = -1):
    """``path`` opened for reading, refused unless it is a regular file.

    The file is opened ``O_NONBLOCK`` and checked with ``fstat`` on the open descriptor, so
    a named pipe (FIFO) planted where singa expects a file (a checkpoint, a manifest, a
    metrics file, a lock record) is refused at once, with the message an explicit path gets
    ("checkpoint file PATH is a named pipe, not a file"), instead of blocking in ``open()``
    until a writer appears; a device or socket likewise. A missing file raises
    ``FileNotFoundError`` (callers decide whether that is an error); any other failure is a
    located :class:`SingaError`."""
    shown = os.fspath(path)
    try:
        fd = os.open(shown, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except IsADirectoryError:
        raise SingaError(
            f"{what} {shown} is a folder, not a file",
            where=shown,
            help="singa reads only regular files here; move the folder away",
        ) from None
    except OSError as exc:
        raise SingaError(
            f"cannot read {what} {shown}: {exc.strerror or exc}",
            where=shown,
            help="check that it is a regular, readable file",
        ) from None
    try:
        mode = os.fstat(fd).st_mode
        problem = not_a_file_problem(mode)
        if problem is not None:
            raise SingaError(
                f"{what} {shown} {problem}",
                where=shown,
                help="singa reads only regular files here (a FIFO would block it forever); "
                "remove it or move it away",
            )
        import fcntl

        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        if text:
            return open(fd, encoding="utf-8", buffering=buffering)  # noqa: SIM115
        return open(fd, "rb", buffering=buffering)  # noqa: SIM115 - the caller closes it
    except BaseException:
        os.close(fd)
        raise


def read_regular_bytes(path, what: str = "file") -> bytes:
    """The bytes of the regular file ``path`` (see :func:`open_regular`)."""
    with open_regular(path, what) as fh:
        try:
            return fh.read()
        except OSError as exc:
            raise SingaError(
                f"cannot read {what} {os.fspath(path)}: {exc.strerror or exc}",
                where=os.fspath(path),
                help="check that it is a regular, readable file",
            ) from None


def read_regular_text(path, what: str = "file") -> str:
    """The UTF-8 text of the regular file ``path`` (``UnicodeDecodeError``, a ValueError,
    for bytes that are not UTF-8, as ``Path.read_text`` raises)."""
    return read_regular_bytes(path, what).decode("utf-8")
