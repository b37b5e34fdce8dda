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
from singa_core.running.fileio import AtomicFile

from ._files import _IndexedFileStore, as_bytes, map_file


class TextFileStore(_IndexedFileStore):
    """Lines of a text file as (line number, line) tuples."""

    type_names = ("textfile",)
    _unit = "line"
    _noun = "file"

    def _open_read(self, path: str) -> None:
        if not os.path.isfile(path):
            raise SingaError(
                f"cannot open store {path}: no such file",
                help="check the store path (relative paths start at the working folder)",
            )
        self._buf, self._mm = map_file(path, "store")
        self._size = len(self._buf)
        self.path = path

    def _open_create(self, path: str) -> None:
        self._out = AtomicFile(path, "store")
        self.path = path

    def _open_append(self, path: str) -> None:
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
        self.path = path

    def _line_end(self, off: int) -> tuple[int, int]:
        """(end of the line's text, start of the next line) for the line at ``off``."""
        nl = self._buf.find(b"\n", off)
        if nl < 0:
            return self._size, self._size
        return nl, nl + 1

    def _record(self, off: int) -> tuple[bytes, bytes, int]:
        end, nxt = self._line_end(off)
        return str(self._index).encode("ascii"), self._buf[off:end], nxt

    def _next_offset(self, off: int) -> int:
        return self._line_end(off)[1]

    def _encode(self, key, value) -> bytes | None:
        value = as_bytes(value, "values")
        if b"\n" in value:
            return None
        return value + b"\n"
