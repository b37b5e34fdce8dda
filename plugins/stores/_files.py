"""Shared by the built-in file stores: read-only mapping, byte coercion and the base class
for stores that read a memory-mapped file of records and write through an AtomicFile."""

from __future__ import annotations

import mmap
import os
import weakref

from singa_core.errors import SingaError
from singa_core.running.fileio import AtomicFile
from singa_core.store import KAPPEND, KCREATE, KREAD, RecordBlock, Store


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


def as_bytes(data, what: str) -> bytes:
    """``data`` (bytes-like, or str encoded as UTF-8) as bytes."""
    if isinstance(data, bytes):
        return data
    if isinstance(data, str):
        return data.encode("utf-8")
    if isinstance(data, bytearray | memoryview):
        return bytes(data)
    raise TypeError(f"store {what} must be bytes or str, got {type(data).__name__}")


#: the most bytes behind the read position whose pages a reader keeps mapped: every time
#: reading has moved this far past them, the pages already read are released
#: (``madvise(MADV_DONTNEED)``: they stay in the page cache, out of the process's resident
#: set), so a run that cycles through a large store does not come to hold the whole file
READ_WINDOW = 2 << 20
#: what a page fault on a file mapping maps at once beyond the page it needs (Linux's
#: fault-around, 64 KiB by default)
_FAULT_AROUND = 64 << 10
_DONTNEED = getattr(mmap, "MADV_DONTNEED", None)  # None: not on this system


class _IndexedFileStore(Store):
    """A store of consecutive records in one file.

    Reading maps the file and indexes record offsets lazily, as records are read or sought
    past, so ``position()``/``seek(i)``/``count()`` work in records. The pages read are
    released behind the read position (:data:`READ_WINDOW`), and after a seek or a count,
    which may have touched the whole file. Writing (kCreate, kAppend) goes to an
    :class:`AtomicFile` that ``close()`` renames into place.

    Subclasses define the format: ``_open_read``/``_open_create``/``_open_append`` (which set
    ``path``, and ``_buf``/``_mm``/``_size`` or ``_out``), ``_record(off)`` (the record at
    byte offset ``off`` as ``(key, value, next offset)``), ``_next_offset(off)`` (just the
    next offset) and ``_encode(key, value)`` (the bytes to write, or None to refuse).
    ``_unit`` names a record and ``_noun`` the file in seek errors.
    """

    _unit = "record"
    _noun = "store"

    def __init__(self) -> None:
        self._mode: int | None = None
        self.path: str | None = None
        self._buf = b""
        self._mm = None
        self._size = 0
        self._off = 0  # byte offset of the next record
        self._index = 0  # index of the next record
        self._offsets = [0]  # _offsets[i]: byte offset of record i, for the records seen so far
        self._kept = 0  # page-aligned offset: the mapped pages before it have been released
        self._out: AtomicFile | None = None
        self._fd: int | None = None  # a reader's descriptor for block reads (pread)
        self._fd_closer: weakref.finalize | None = None

    # ------------------------------------------------------------------ opening
    def open(self, path: str, mode: int) -> None:
        self.close()
        path = os.fspath(path)
        opener = {KREAD: self._open_read, KCREATE: self._open_create, KAPPEND: self._open_append}
        if mode not in opener:
            raise ValueError(f"unknown store mode {mode!r}")
        try:
            opener[mode](path)
        except BaseException:
            # a failed open leaves nothing behind: no writer whose close() could replace
            # the existing file with a partial copy
            self.abort()
            raise
        self._mode = mode

    def _open_read(self, path: str) -> None:  # pragma: no cover
        raise NotImplementedError

    def _open_create(self, path: str) -> None:  # pragma: no cover
        raise NotImplementedError

    def _open_append(self, path: str) -> None:  # pragma: no cover
        raise NotImplementedError

    def _wrong_mode(self, action: str) -> SingaError:
        state = "not open" if self._mode is None else "not open in a mode that allows it"
        return SingaError(
            f"cannot {action} store {self.path}: it is {state}",
            help="open it with kRead to read, with kCreate or kAppend to write",
        )

    # ------------------------------------------------------------------ reading
    def _record(self, off: int) -> tuple[bytes, bytes, int]:  # pragma: no cover
        raise NotImplementedError

    def _next_offset(self, off: int) -> int:  # pragma: no cover
        raise NotImplementedError

    def read(self) -> tuple[bytes, bytes] | None:
        if self._mode != KREAD:
            raise self._wrong_mode("read from")
        if self._off >= self._size:
            return None
        key, value, nxt = self._record(self._off)
        self._off = nxt
        self._index += 1
        if self._index == len(self._offsets):
            self._offsets.append(nxt)
        if nxt - self._kept >= READ_WINDOW:
            self._release_pages(self._kept, nxt)
        return key, value

    def _block(self, off: int, n: int):  # pragma: no cover - a format without blocks
        """The ``n`` tuples from byte offset ``off`` as ``(keys, values, tuple length)``
        when they have equal lengths and are all in the file (checked as ``_record``
        checks one), else None."""
        return None

    def read_block(self, n: int) -> RecordBlock | None:
        if self._mode != KREAD:
            raise self._wrong_mode("read from")
        if n <= 0 or self._off >= self._size:
            return None
        found = self._block(self._off, int(n))
        if found is None:
            return None
        keys, values, stride = found
        start, first = self._off, self._index
        self._off = start + n * stride
        self._index = first + n
        if len(self._offsets) < self._index + 1:  # offsets of the records seen for the first time
            seen = len(self._offsets) - 1 - first  # of these n, already indexed
            self._offsets.extend(range(start + (seen + 1) * stride, self._off + 1, stride))
        if self._off - self._kept >= READ_WINDOW:
            self._release_pages(self._kept, self._off)
        return RecordBlock(keys, values)

    def resident_bytes(self) -> int:
        """The most memory of the mapped file that reading keeps resident: the pages of
        :data:`READ_WINDOW` bytes (or the whole file, when smaller) and a fault's neighbours."""
        if self._mm is None:
            return 0
        return self._size if _DONTNEED is None else min(self._size, READ_WINDOW + _FAULT_AROUND)

    def _release_pages(self, start: int, end: int) -> None:
        """Release the whole pages of the mapping in ``[start, end)`` (``start`` is
        page-aligned; the page holding ``end`` is kept) and keep what follows."""
        end -= end % mmap.PAGESIZE
        if self._mm is not None and end > start and _DONTNEED is not None:
            self._mm.madvise(_DONTNEED, start, end - start)
        self._kept = max(start, end)

    def _release_all(self) -> None:
        """Release every mapped page (after a jump that may have touched any of them)."""
        self._release_pages(0, self._size)
        self._kept = self._off - self._off % mmap.PAGESIZE

    def seek_to_first(self) -> None:
        if self._mode != KREAD:
            raise self._wrong_mode("rewind")
        self._off = 0
        self._index = 0
        self._release_all()

    def position(self) -> int:
        return self._index

    def seek(self, position: int) -> None:
        if self._mode != KREAD:
            raise self._wrong_mode("seek in")
        position = int(position)
        unit = self._unit
        if position < 0:
            raise SingaError(
                f"cannot seek to {unit} {position} of store {self.path}",
                help=f"{unit} positions start at 0",
            )
        self._index_until(position)
        if position >= len(self._offsets):
            raise SingaError(
                f"cannot seek to {unit} {position} of store {self.path}: "
                f"it has only {len(self._offsets) - 1} {unit}s",
                help=f"the {self._noun} is shorter than when the position was saved; "
                "resume with the data file the job was started with",
            )
        self._off = self._offsets[position]
        self._index = position
        self._release_all()

    def _index_until(self, position: int | None) -> None:
        """Extend the offset index up to ``position`` (or the end of the file)."""
        off = self._offsets[-1]
        while off < self._size and (position is None or len(self._offsets) <= position):
            off = self._next_offset(off)
            self._offsets.append(off)

    def count(self) -> int:
        """Number of records (tuples) in the file, like 0.3's KVFile::Count.

        Indexes the whole file, so a damaged record anywhere in it raises.
        """
        if self._mode != KREAD:
            raise self._wrong_mode("count")
        self._index_until(None)
        self._release_all()
        return len(self._offsets) - 1

    # ------------------------------------------------------------------ writing
    def _encode(self, key, value) -> bytes | None:  # pragma: no cover
        raise NotImplementedError

    def write(self, key, value) -> bool:
        if self._out is None:
            raise self._wrong_mode("write to")
        data = self._encode(key, value)
        if data is None:
            return False
        self._out.write(data)
        return True

    def flush(self) -> None:
        if self._out is not None:
            self._out.flush()

    # ------------------------------------------------------------------ closing
    def close(self) -> None:
        """Finish: a writer's temp file is renamed into place; a reader's map is released."""
        out, self._out = self._out, None
        try:
            if out is not None:
                out.commit()
        finally:
            self._release()

    def abort(self) -> None:
        """Discard what a writer wrote (the file at ``path`` is left as it was)."""
        out, self._out = self._out, None
        if out is not None:
            out.abort()
        self._release()

    def _open_block_reads(self, path: str) -> None:
        """Keep a descriptor of the file for :meth:`_read_bytes` (where ``os.pread``
        exists; else blocks are sliced from the mapping). A store dropped without
        ``close()`` (the input layers leave theirs to the garbage collector, as they do
        the mapping) closes it as it goes, silently (``weakref.finalize``)."""
        if hasattr(os, "pread") and self._mm is not None:
            try:
                fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            except OSError:
                return  # the mapping still reads it
            self._fd, self._fd_closer = fd, weakref.finalize(self, os.close, fd)

    def _read_bytes(self, off: int, n: int) -> bytes:
        """The file's bytes ``[off, off + n)`` (inside the file), copied: one ``pread``,
        which copies from the page cache without mapping a page, where the mapping's copy
        faults its pages in (a batch of 100 CIFAR-10 records, 310 KB: 67 µs against 853 µs
        on the 2-vCPU VM of docs/performance.md); a short read falls back to the mapping."""
        if self._fd is not None:
            data = os.pread(self._fd, n, off)
            if len(data) == n:
                return data
        return self._buf[off : off + n]

    def _release(self) -> None:
        if self._fd_closer is not None:
            self._fd_closer()  # closes the descriptor once
        self._fd = self._fd_closer = None
        if self._mm is not None:
            self._mm.close()
        self._mm = None
        self._buf = b""
        self._size = self._off = self._index = self._kept = 0
        self._offsets = [0]
        self._mode = None

    def __exit__(self, exc_type, *exc) -> None:
        if exc_type is not None:
            self.abort()  # a failed writer leaves the old file (or none) in place
        else:
            self.close()

    def __del__(self) -> None:
        # never publish a store that was not closed explicitly
        if getattr(self, "_out", None) is not None:
            self.abort()
        elif getattr(self, "_mm", None) is not None:
            self._mm.close()
