"""A file store's reader keeps at most READ_WINDOW bytes of its file mapped (issue 31: a run
cycling through a large store came to hold the whole file in its resident set, which the
memory estimate charges as the window): the pages behind the read position are released,
and reading after a rewind or a seek still returns the records."""

from __future__ import annotations

import os

import pytest
from singa_builtins.stores._files import READ_WINDOW
from singa_builtins.stores.kvfile import KVFileStore

from singa_core.store import KCREATE, KREAD

RECORD = 4000  # bytes of a value
COUNT = 3 * READ_WINDOW // RECORD  # a file of three windows


def _mapped_rss(path) -> int:
    """Resident bytes of this process's mappings of ``path`` (from /proc/self/smaps)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as fh:
        for line in fh:
            fields = line.split()
            if "-" in fields[0] and len(fields) >= 5 and ":" in fields[3]:  # a mapping's line
                inside = len(fields) >= 6 and fields[5] == str(path)
            elif inside and fields[0] == "Rss:":
                total += int(fields[1]) * 1024
    return total


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs Linux's smaps")
def test_reading_keeps_a_window_of_the_file_mapped(tmp_path):
    path = tmp_path / "big.bin"
    out = KVFileStore()
    out.open(str(path), KCREATE)
    for i in range(COUNT):
        out.write(f"{i:08d}".encode(), bytes([i % 251]) * RECORD)
    out.close()
    store = KVFileStore()
    store.open(str(path), KREAD)
    limit = READ_WINDOW + (64 << 10) + 4096  # the window, a fault's neighbours, a page
    assert store.resident_bytes() == READ_WINDOW + (64 << 10)
    try:
        for _ in range(2):  # a pass, a rewind, the same records again
            most = 0
            for i in range(COUNT):
                key, value = store.read()
                assert key == f"{i:08d}".encode() and value == bytes([i % 251]) * RECORD
                if i % 64 == 0:
                    most = max(most, _mapped_rss(path))
            assert store.read() is None
            assert 0 < most <= limit, most
            store.seek_to_first()
        store.seek(COUNT - 5)  # a seek back and forth: the records are those of the file
        assert store.read()[0] == f"{COUNT - 5:08d}".encode()
        assert store.count() == COUNT and _mapped_rss(path) <= limit
        assert store.read()[0] == f"{COUNT - 4:08d}".encode()
    finally:
        store.close()
