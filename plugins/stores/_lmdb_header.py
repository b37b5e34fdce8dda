"""The size check of an LMDB data file, made before LMDB maps it.

LMDB maps ``data.mdb`` into memory and follows page numbers into it; a page past the end of
a truncated file (a copy or download that stopped early) is not an error LMDB can report
but a SIGBUS that kills the process without a word. The two meta pages at the start of the
file say how long it must be: the newer one (higher transaction id) names the last page the
database uses, and the free-list database's ``md_pad`` holds the page size. A file shorter
than ``(last page + 1) * page size`` is refused here, naming the file, both sizes and the
fix.

Layout (liblmdb's ``MDB_page`` header then ``MDB_meta``, 64-bit build, little-endian):
page header 16 bytes; ``mm_magic`` u32 (0xBEEFC0DE), ``mm_version`` u32, ``mm_address``
u64, ``mm_mapsize`` u64, two ``MDB_db`` records of 48 bytes (``md_pad`` u32, ``md_flags``
u16, ``md_depth`` u16, five u64 counts and the root page), ``mm_last_pg`` u64, ``mm_txnid``
u64. The second meta page starts one page in. A file written by a 32-bit build (other
offsets) is left to LMDB, which reads it itself.
"""

from __future__ import annotations

import os
import struct

from singa_core.errors import SingaError

MAGIC = 0xBEEFC0DE
_META = 16  # offset of MDB_meta in a meta page
_MAGIC_VERSION = struct.Struct("<II")
_PAGE_SIZE = struct.Struct("<I")  # md_pad of the free-list MDB_db: the page size
_LAST_TXN = struct.Struct("<QQ")  # mm_last_pg, mm_txnid
_DBS = _META + 8 + 16  # after magic, version, address and map size
_TAIL = _DBS + 2 * 48  # mm_last_pg
_MIN_PAGE, _MAX_PAGE = 512, 1 << 16

_HELP = (
    "the database file is incomplete (a copy or download that stopped early, a full disk "
    "while it was written) or damaged; copy it again, or re-create it (e.g. with Caffe's "
    "convert_imageset, or `singa data images DIR --out OUT --backend lmdb`)"
)


def _meta(head: bytes, offset: int):
    """(page size, last page, txnid) of the meta page at ``offset``, or None."""
    if len(head) < offset + _TAIL + _LAST_TXN.size:
        return None
    magic, _version = _MAGIC_VERSION.unpack_from(head, offset + _META)
    if magic != MAGIC:
        return None
    (page,) = _PAGE_SIZE.unpack_from(head, offset + _DBS)
    last, txnid = _LAST_TXN.unpack_from(head, offset + _TAIL)
    return page, last, txnid


def check_data_file(path: str) -> None:
    """Raise a SingaError unless the LMDB data file at ``path`` is at least as long as its
    own meta pages say (see the module docstring)."""
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            head = fh.read(_MAX_PAGE + _TAIL + _LAST_TXN.size)
    except OSError as exc:
        raise SingaError(
            f"cannot open LMDB database {path}: {exc.strerror or exc}",
            where=path,
            help="check that the file exists and is readable",
        ) from None
    first = _meta(head, 0)
    starts = len(head) >= _META + 4 and _MAGIC_VERSION.unpack_from(head, _META)[0] == MAGIC
    if first is None and starts:
        raise SingaError(
            f"LMDB database {path} is truncated: {size} bytes, not even its first meta page",
            where=path,
            help=_HELP,
        )
    if first is None:
        raise SingaError(
            f"{path} is not an LMDB database: "
            + (
                "the file is empty"
                if size == 0
                else f"its first page does not start with LMDB's magic number ({size} bytes)"
            ),
            where=path,
            help=_HELP,
        )
    page = first[0]
    if page & (page - 1) or not _MIN_PAGE <= page <= _MAX_PAGE:
        return  # not the 64-bit layout this check knows: LMDB judges the file itself
    second = _meta(head, page) if size >= 2 * page else None
    if second is None:
        raise SingaError(
            f"LMDB database {path} is truncated: {size} bytes, shorter than its two "
            f"{page}-byte meta pages",
            where=path,
            help=_HELP,
        )
    _, last, txnid = max((first, second), key=lambda m: m[2])
    need = (last + 1) * page
    if size < need:
        raise SingaError(
            f"LMDB database {path} is truncated: {size} bytes, but its header says it "
            f"uses {last + 1} pages of {page} bytes ({need} bytes, transaction {txnid})",
            where=path,
            help=_HELP,
        )
