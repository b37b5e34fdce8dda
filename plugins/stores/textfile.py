"""textfile: SINGA 0.3's TextFileStore, one tuple per line.

``read()`` returns ``(key, value)`` with key = the line number as a decimal string starting at
``b"0"`` (reset by ``seek_to_first``) and value = the line's bytes without the ``\\n``; a last
line without a newline still counts (like ``std::getline``). ``write`` ignores the key and
writes ``value + b"\\n"``.

Differences, for safety: ``write`` refuses (returns False for) a value containing a newline,
which would otherwise turn into two tuples; kAppend adds a missing final newline before
appending; kCreate and kAppend write a temp file in the same folder that ``close()`` renames
into place, so the file at ``path`` is always complete (``flush()`` only pushes data to the
temp file). As in 0.3, kAppend on a missing file starts an empty one.

``position()`` is the number of the next line; ``seek(i)`` goes to line ``i``.
"""

from __future__ import annotations

import os

from singa_core.errors import SingaError
from singa_core.store import KAPPEND, KCREATE, KREAD, Store

from ._files import AtomicFile, as_bytes, map_file


class TextFileStore(Store):
    """Lines of a text file as (line number, line) tuples."""

    type_names = ("textfile",)

    def __init__(self) -> None:
        self._mode: int | None = None
        self.path: str | None = None
        self._buf = b""
        self._mm = None
        self._size = 0
        self._off = 0
        self._index = 0
        self._offsets = [0]  # _offsets[i]: byte offset of line i, for the lines seen so far
        self._out: AtomicFile | None = None

    def open(self, path: str, mode: int) -> None:
        self.close()
        path = os.fspath(path)
        if mode == KREAD:
            if not os.path.isfile(path):
                raise SingaError(
                    f"cannot open store {path}: no such file",
                    help="check the store path (relative paths start at the working folder)",
                )
            self._buf, self._mm = map_file(path, "store")
            self._size = len(self._buf)
        elif mode == KCREATE:
            self._out = AtomicFile(path, "store")
        elif mode == KAPPEND:
            self._out = AtomicFile(path, "store")
            if os.path.isfile(path):
                buf, mm = map_file(path, "store")
                try:
                    for start in range(0, len(buf), 1 << 24):
                        self._out.write(buf[start : start + (1 << 24)])
                    if len(buf) and buf[len(buf) - 1 : len(buf)] != b"\n":
                        self._out.write(b"\n")
                finally:
                    if mm is not None:
                        mm.close()
        else:
            raise ValueError(f"unknown store mode {mode!r}")
        self.path = path
        self._mode = mode

    def _wrong_mode(self, action: str) -> SingaError:
        state = "not open" if self._mode is None else "not open in a mode that allows it"
        return SingaError(
            f"cannot {action} store {self.path}: it is {state}",
            help="open it with kRead to read, with kCreate or kAppend to write",
        )

    def _line_end(self, off: int) -> tuple[int, int]:
        """(end of the line's text, start of the next line) for the line at ``off``."""
        nl = self._buf.find(b"\n", off)
        if nl < 0:
            return self._size, self._size
        return nl, nl + 1

    def read(self) -> tuple[bytes, bytes] | None:
        if self._mode != KREAD:
            raise self._wrong_mode("read from")
        off = self._off
        if off >= self._size:
            return None
        end, nxt = self._line_end(off)
        key = str(self._index).encode("ascii")
        self._off = nxt
        self._index += 1
        if self._index == len(self._offsets):
            self._offsets.append(nxt)
        return key, self._buf[off:end]

    def seek_to_first(self) -> None:
        if self._mode != KREAD:
            raise self._wrong_mode("rewind")
        self._off = 0
        self._index = 0

    def position(self) -> int:
        return self._index

    def seek(self, position: int) -> None:
        if self._mode != KREAD:
            raise self._wrong_mode("seek in")
        position = int(position)
        if position < 0:
            raise SingaError(
                f"cannot seek to line {position} of store {self.path}",
                help="line positions start at 0",
            )
        self._index_until(position)
        if position >= len(self._offsets):
            raise SingaError(
                f"cannot seek to line {position} of store {self.path}: "
                f"it has only {len(self._offsets) - 1} lines",
                help="the file is shorter than when the position was saved; "
                "resume with the data file the job was started with",
            )
        self._off = self._offsets[position]
        self._index = position

    def _index_until(self, position: int | None) -> None:
        off = self._offsets[-1]
        while off < self._size and (position is None or len(self._offsets) <= position):
            off = self._line_end(off)[1]
            self._offsets.append(off)

    def count(self) -> int:
        """Number of lines (tuples) in the file."""
        if self._mode != KREAD:
            raise self._wrong_mode("count")
        self._index_until(None)
        return len(self._offsets) - 1

    def write(self, key, value) -> bool:
        if self._out is None:
            raise self._wrong_mode("write to")
        value = as_bytes(value, "values")
        if b"\n" in value:
            return False
        self._out.write(value + b"\n")
        return True

    def flush(self) -> None:
        if self._out is not None:
            self._out.flush()

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

    def _release(self) -> None:
        if self._mm is not None:
            self._mm.close()
        self._mm = None
        self._buf = b""
        self._size = self._off = self._index = 0
        self._offsets = [0]
        self._mode = None

    def __exit__(self, exc_type, *exc) -> None:
        if exc_type is not None:
            self.abort()  # a failed writer leaves the old file (or none) in place
        else:
            self.close()

    def __del__(self) -> None:
        # never publish a file that was not closed explicitly
        if getattr(self, "_out", None) is not None:
            self.abort()
        elif getattr(self, "_mm", None) is not None:
            self._mm.close()
