"""kvfile: SINGA 0.3's KVFileStore / io::KVFile binary record file.

Layout, repeated until the end of the file (no header, no footer)::

    [key_len: u64 little-endian][key bytes][val_len: u64 little-endian][val bytes]

(0.3's size_t on x86-64; 0.1's DataShard used the same layout in ``<folder>/shard.dat``.)

**Checksummed tuples.** singa writes every tuple with bit 63 of ``key_len`` set and a CRC-32
(zlib's, u32 little-endian) of the whole tuple before it (both lengths, key and value)
after the value::

    [key_len | 1<<63][key][val_len][val][crc32: u32 little-endian]

so a flipped byte anywhere in a record (a changed shape field, a bad sector) is an error
naming the file, the record's index, key and offset, not silently wrong training data. 0.3
never wrote a key length that large, so both kinds of tuple read, mixed in one file (kAppend
of a 0.3 file keeps its tuples and adds checksummed ones). ``SINGA_KVFILE_CHECKSUMS=0``
writes 0.3's plain tuples, for SINGA 0.3 itself to read. Checking costs a CRC pass over each
record read (``benchmarks/store_checksum.py``).

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
import warnings
import zlib

import numpy as np

from singa_core.errors import SingaError, SingaWarning
from singa_core.running.fileio import AtomicFile

from ._files import _IndexedFileStore, as_bytes, map_file

_LEN = struct.Struct("<Q")
_CRC = struct.Struct("<I")
_CHECKED = 1 << 63  # bit of key_len: a CRC-32 of the tuple follows its value
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


class KVFileStore(_IndexedFileStore):
    """Binary (key, value) tuples with u64 little-endian length prefixes."""

    type_names = ("kvfile",)
    _unit = "record"
    _noun = "store"

    def __init__(self) -> None:
        super().__init__()
        self._keys: set[bytes] = set()
        self.checksums = os.environ.get("SINGA_KVFILE_CHECKSUMS", "1").strip() != "0"
        self._warned_unchecked = False  # one SingaWarning per store for 0.3's plain tuples
        self._block_stride = 0  # the tuple length of the last block read (0: none yet)

    # ------------------------------------------------------------------ opening
    def _open_read(self, path: str) -> None:
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
        self._open_block_reads(found)

    def _open_create(self, path: str) -> None:
        self.path = path
        self._out = AtomicFile(path, "store")

    def _open_append(self, path: str) -> None:
        """Collect the file's keys, drop a partial last tuple, copy the rest to the temp file."""
        found = _resolve_existing(path)
        if found is None:
            raise SingaError(
                f"cannot open store {path} for appending: no such file",
                help="open a new store with mode kCreate; kAppend adds to an existing one",
            )
        path = found  # the file itself, or <path>/shard.dat
        buf, mm = map_file(path, "store")
        try:
            size, off, keys = len(buf), 0, set()
            while off < size:
                tup = self._parse(buf, size, off, path, strict=False)
                if tup is None:
                    break  # partial (or damaged) tail: dropped, as 0.3's PrepareForAppend does
                ks, ke, _, _, end = tup
                keys.add(buf[ks:ke])
                off = end
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
            crc = klen & _CHECKED
            klen &= ~_CHECKED
            ke = off + 8 + klen
            if ke + _LEN.size > size:
                problem = f"key length {klen} runs past the end of the file ({size} bytes)"
            else:
                (vlen,) = _LEN.unpack_from(buf, ke)
                ve = ke + 8 + vlen
                if vlen == 0:
                    problem = "a tuple with an empty value (kvfile never stores one)"
                elif ve + (_CRC.size if crc else 0) > size:
                    problem = f"value length {vlen} runs past the end of the file ({size} bytes)"
                elif crc:
                    return off + 8, ke, ke + 8, ve, ve + _CRC.size
                else:
                    return off + 8, ke, ke + 8, ve, ve
        if not strict:
            return None
        raise SingaError(
            f"corrupt kvfile store: truncated or damaged tuple at byte offset {off}: {problem}",
            where=path,
            help=_CORRUPT_HELP,
        )

    def _record(self, off: int) -> tuple[bytes, bytes, int]:
        ks, ke, vs, ve, end = self._parse(self._buf, self._size, off, self.path)
        buf = self._buf
        if end == ve and not self._warned_unchecked:  # 0.3's plain tuple: nothing to check
            self._warned_unchecked = True
            warnings.warn(
                f"{self.path}: its records carry no checksum (written by SINGA 0.3, or with "
                "SINGA_KVFILE_CHECKSUMS=0): damage inside a record is not detected; "
                "re-create it with singa data (or a singa converter) to add checksums",
                SingaWarning,
                stacklevel=2,
            )
        if end != ve:
            (stored,) = _CRC.unpack_from(buf, ve)
            if zlib.crc32(buf[off:ve]) != stored:
                raise self._checksum_error(off, buf[ks:ke])
        return buf[ks:ke], buf[vs:ve], end

    def _block(self, off: int, n: int):
        """``n`` tuples of the first one's lengths from ``off``: their bytes copied out of
        the file at once (:meth:`_read_bytes`), every tuple's lengths compared and checksum
        checked. The block is read with the last block's tuple length, and its first
        tuple parsed from the bytes read, so that no page of the mapping is touched."""
        raw = None
        stride = self._block_stride
        if stride and off + n * stride <= self._size:
            raw = self._read_bytes(off, n * stride)
            first = self._parse(raw, len(raw), 0, self.path, strict=False)
            if first is None or first[4] != stride or first[3] == first[4]:
                raw = None  # another length (or a plain tuple): parsed from the mapping
        if raw is None:
            ks, ke, vs, ve, end = self._parse(self._buf, self._size, off, self.path)
            stride = end - off
            if off + n * stride > self._size:
                return None  # the end of the file comes first: read one by one (and rewind)
            if end == ve:  # plain 0.3 tuples: _record warns about them (once) and reads them
                return None
            raw = self._read_bytes(off, n * stride)  # the block's bytes, copied once
            first = (ks - off, ke - off, vs - off, ve - off, stride)
            self._block_stride = stride
        ks, ke, vs, ve, _ = first
        block = np.frombuffer(raw, np.uint8).reshape(n, stride)
        lengths = np.concatenate((block[:, :8], block[:, ke : ke + 8]), axis=1)
        if not (lengths == lengths[0]).all():
            return None  # tuples of other lengths: one by one
        stored = block[:, stride - _CRC.size :].copy().view("<u4").ravel().tolist()
        view, checked = memoryview(raw), stride - _CRC.size
        for i in range(n):
            at = i * stride
            if zlib.crc32(view[at : at + checked]) != stored[i]:
                return None  # read one by one, the damaged record's error raised there
        keys = block[:, ks:ke]  # read-only views of the copied bytes
        values = block[:, vs:ve]
        return keys, values, stride

    def _checksum_error(self, off: int, key: bytes) -> SingaError:
        shown = key[:200].decode("utf-8", "backslashreplace")
        return SingaError(
            f"corrupt kvfile store: record {self._index} (key '{shown}') at byte offset "
            f"{off} fails its checksum: its bytes changed after it was written",
            where=self.path,
            help="the file is damaged (a bad disk or copy, or an edit by another program); "
            "re-create it with the program that wrote it (for the examples' data: "
            "`singa data <name>`), or copy it again",
        )

    def _next_offset(self, off: int) -> int:
        return self._parse(self._buf, self._size, off, self.path)[4]

    # ------------------------------------------------------------------ writing
    def _encode(self, key, value) -> bytes | None:
        key, value = as_bytes(key, "keys"), as_bytes(value, "values")
        if not value or key in self._keys:
            return None
        if not self.checksums:
            return b"".join((_LEN.pack(len(key)), key, _LEN.pack(len(value)), value))
        tup = b"".join((_LEN.pack(len(key) | _CHECKED), key, _LEN.pack(len(value)), value))
        return tup + _CRC.pack(zlib.crc32(tup))

    # ------------------------------------------------------------------ closing
    def _release(self) -> None:
        super()._release()
        self._keys = set()
