"""kvfile: SINGA 0.3's KVFileStore / io::KVFile binary record file.

Layout, repeated until the end of the file (no header, no footer)::

    [key_len: u64 little-endian][key bytes][val_len: u64 little-endian][val bytes]

(0.3's size_t on x86-64; 0.1's DataShard used the same layout in ``<folder>/shard.dat``.)

Semantics kept from 0.3: kRead falls back to ``<path>/shard.dat`` when ``path`` is not a
file; ``write`` rejects (returns False for) empty values, and in kAppend mode keys already in
the file; duplicates written within one session are not detected; kAppend first drops a
partial last tuple.

Differences, for safety: a truncated or corrupt tuple met while reading raises a SingaError
naming the file and byte offset (0.3 silently treated it as the end of the data); kCreate
and kAppend write a temp file in the same folder that ``close()`` renames into place, so the
store at ``path`` is always complete (``flush()`` only pushes data to the temp file).

``position()`` is the index of the next record; ``seek(i)`` goes to record ``i``. Reading
memory-maps the file and indexes record offsets as it goes.
"""

from __future__ import annotations

import os
import struct

from singa_core.errors import SingaError
from singa_core.store import KAPPEND, KCREATE, KREAD, Store

from ._files import AtomicFile, as_bytes, map_file

_LEN = struct.Struct("<Q")
_CORRUPT_HELP = (
    "the file is damaged or incomplete (e.g. a copy or download that stopped early), or it "
    "is not a kvfile store; re-create it with the program that wrote it (for the examples' "
    "data: `singa data <name>`)"
)


def _resolve_existing(path: str) -> str | None:
    """``path`` if it is a file, else ``<path>/shard.dat`` if that is, else None."""
    if os.path.isfile(path):
        return path
    shard = os.path.join(path, "shard.dat")
    if os.path.isfile(shard):
        return shard
    return None


class KVFileStore(Store):
    """Binary (key, value) tuples with u64 little-endian length prefixes."""

    type_names = ("kvfile",)

    def __init__(self) -> None:
        self._mode: int | None = None
        self.path: str | None = None
        self._buf = b""
        self._mm = None
        self._size = 0
        self._off = 0  # byte offset of the next record
        self._index = 0  # index of the next record
        self._offsets = [0]  # _offsets[i]: byte offset of record i, for the records seen so far
        self._out: AtomicFile | None = None
        self._keys: set[bytes] = set()

    # ------------------------------------------------------------------ opening
    def open(self, path: str, mode: int) -> None:
        self.close()
        path = os.fspath(path)
        if mode == KREAD:
            found = _resolve_existing(path)
            if found is None:
                raise SingaError(
                    f"cannot open store {path}: no such file (nor {path}/shard.dat)",
                    help="check the store path; to make the examples' data files, run "
                    "`singa data <name>` (e.g. `singa data mnist`)",
                )
            self.path = found
            self._buf, self._mm = map_file(found, "store")
            self._size = len(self._buf)
        elif mode == KCREATE:
            self.path = path
            self._out = AtomicFile(path, "store")
        elif mode == KAPPEND:
            found = _resolve_existing(path)
            if found is None:
                raise SingaError(
                    f"cannot open store {path} for appending: no such file",
                    help="open a new store with mode kCreate; kAppend adds to an existing one",
                )
            self._open_append(found)
        else:
            raise ValueError(f"unknown store mode {mode!r}")
        self._mode = mode

    def _open_append(self, path: str) -> None:
        """Collect the file's keys, drop a partial last tuple, copy the rest to the temp file."""
        buf, mm = map_file(path, "store")
        try:
            size, off, keys = len(buf), 0, set()
            while off < size:
                tup = self._parse(buf, size, off, path, strict=False)
                if tup is None:
                    break  # partial (or damaged) tail: dropped, as 0.3's PrepareForAppend does
                ks, ke, _, ve = tup
                keys.add(buf[ks:ke])
                off = ve
            self.path = path
            self._keys = keys
            self._out = AtomicFile(path, "store")
            for start in range(0, off, 1 << 24):
                self._out.write(buf[start : min(off, start + (1 << 24))])
        finally:
            if mm is not None:
                mm.close()

    # ------------------------------------------------------------------ reading
    @staticmethod
    def _parse(buf, size: int, off: int, path: str, strict: bool = True):
        """Bounds of the tuple at ``off``: (key start, key end, value start, value end)."""
        problem = None
        if size - off < _LEN.size:
            problem = f"only {size - off} bytes left where an 8-byte key length was expected"
        else:
            (klen,) = _LEN.unpack_from(buf, off)
            ke = off + 8 + klen
            if ke + _LEN.size > size:
                problem = f"key length {klen} runs past the end of the file ({size} bytes)"
            else:
                (vlen,) = _LEN.unpack_from(buf, ke)
                ve = ke + 8 + vlen
                if vlen == 0:
                    problem = "a tuple with an empty value (kvfile never stores one)"
                elif ve > size:
                    problem = f"value length {vlen} runs past the end of the file ({size} bytes)"
                else:
                    return off + 8, ke, ke + 8, ve
        if not strict:
            return None
        raise SingaError(
            f"corrupt kvfile store: truncated or damaged tuple at byte offset {off}: {problem}",
            where=path,
            help=_CORRUPT_HELP,
        )

    def _wrong_mode(self, action: str) -> SingaError:
        state = "not open" if self._mode is None else "not open in a mode that allows it"
        return SingaError(
            f"cannot {action} store {self.path}: it is {state}",
            help="open it with kRead to read, with kCreate or kAppend to write",
        )

    def read(self) -> tuple[bytes, bytes] | None:
        if self._mode != KREAD:
            raise self._wrong_mode("read from")
        off = self._off
        if off >= self._size:
            return None
        ks, ke, vs, ve = self._parse(self._buf, self._size, off, self.path)
        buf = self._buf
        self._off = ve
        self._index += 1
        if self._index == len(self._offsets):
            self._offsets.append(ve)
        return buf[ks:ke], buf[vs:ve]

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
                f"cannot seek to record {position} of store {self.path}",
                help="record positions start at 0",
            )
        if position >= len(self._offsets):
            self._index_until(position)
            if position >= len(self._offsets):
                raise SingaError(
                    f"cannot seek to record {position} of store {self.path}: "
                    f"it has only {len(self._offsets) - 1} records",
                    help="the store is shorter than when the position was saved; "
                    "resume with the data file the job was started with",
                )
        self._off = self._offsets[position]
        self._index = position

    def _index_until(self, position: int | None) -> None:
        """Extend the offset index up to ``position`` (or the end of the file)."""
        off = self._offsets[-1]
        while off < self._size and (position is None or len(self._offsets) <= position):
            off = self._parse(self._buf, self._size, off, self.path)[3]
            self._offsets.append(off)

    def count(self) -> int:
        """Number of records in the file (0.3's KVFile::Count); validates the whole file."""
        if self._mode != KREAD:
            raise self._wrong_mode("count")
        self._index_until(None)
        return len(self._offsets) - 1

    # ------------------------------------------------------------------ writing
    def write(self, key, value) -> bool:
        if self._out is None:
            raise self._wrong_mode("write to")
        key, value = as_bytes(key, "keys"), as_bytes(value, "values")
        if not value or key in self._keys:
            return False
        self._out.write(b"".join((_LEN.pack(len(key)), key, _LEN.pack(len(value)), value)))
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

    def _release(self) -> None:
        if self._mm is not None:
            self._mm.close()
        self._mm = None
        self._buf = b""
        self._size = self._off = self._index = 0
        self._offsets = [0]
        self._keys = set()
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
