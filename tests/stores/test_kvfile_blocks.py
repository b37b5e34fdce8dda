"""kvfile's ``read_block(n)``: n same-length tuples read at once are exactly the tuples n
``read()`` calls give, and leave the store where those calls leave it; any other case
(tuples of other lengths, the end of the file, 0.3's plain tuples, a damaged record) is
declined without reading, so the caller reads one by one and meets that path's errors."""

from __future__ import annotations

import os
import struct

import pytest
from singa_builtins.stores.kvfile import KVFileStore

from singa_core.errors import SingaError
from singa_core.store import KREAD, RecordBlock
from tests.stores.test_kvfile_checksums import write as write_store


def write(path, tuples):
    write_store(path, tuples)  # the checksum tests' writer: through KVFileStore, kCreate
    return path


def opened(path):
    s = KVFileStore()
    s.open(str(path), KREAD)
    return s


def fixed(n, start=0):
    return [(b"%06d" % i, bytes([i % 251]) * 40) for i in range(start, start + n)]


def test_a_block_is_the_tuples_reads_give_and_ends_where_they_end(tmp_path):
    path = write(tmp_path / "s.bin", fixed(50))
    one, blocks = opened(path), opened(path)
    for n in (7, 7, 16):
        block = blocks.read_block(n)
        assert isinstance(block, RecordBlock) and len(block) == n
        assert list(block) == [one.read() for _ in range(n)]
        assert block[0] == (bytes(block.keys[0]), bytes(block.values[0]))
        assert blocks.position() == one.position()
        assert blocks._offsets == one._offsets  # the index of offsets grows alike
    blocks.seek(3)  # the offsets a block indexed are the ones seek uses
    one.seek(3)
    assert blocks.read() == one.read()
    blocks.seek_to_first()
    assert list(blocks.read_block(50)) == fixed(50)


def test_declined_blocks_read_nothing(tmp_path):
    mixed = fixed(4) + [(b"000004", b"longer value" * 5)] + fixed(4, 5)
    path = write(tmp_path / "mixed.bin", mixed)
    s = opened(path)
    assert s.read_block(6) is None and s.position() == 0  # lengths differ inside it
    assert list(s.read_block(4)) == mixed[:4]
    assert s.read_block(5) is None  # the next tuple's length starts another run
    assert s.read() == mixed[4]
    assert s.read_block(5) is None and s.position() == 5  # only 4 are left before the end
    assert list(s.read_block(4)) == mixed[5:]
    assert s.read_block(1) is None  # at the end


def test_a_damaged_record_is_declined_and_read_one_by_one_raises(tmp_path):
    path = write(tmp_path / "s.bin", fixed(10))
    data = bytearray(path.read_bytes())
    stride = len(data) // 10
    data[6 * stride + 30] ^= 0x01  # a byte of record 6's value
    path.write_bytes(bytes(data))
    s = opened(path)
    assert s.read_block(10) is None and s.position() == 0
    for _ in range(6):
        s.read()
    with pytest.raises(SingaError, match="record 6 .*fails its checksum"):
        s.read()


def test_plain_tuples_of_singa_0_3_are_read_one_by_one(tmp_path):
    path = tmp_path / "plain.bin"
    path.write_bytes(
        b"".join(struct.pack("<Q", 6) + k + struct.pack("<Q", len(v)) + v for k, v in fixed(5))
    )
    s = opened(path)
    assert s.read_block(5) is None and s.position() == 0
    with pytest.warns(Warning, match="no checksum"):  # said by read(), once
        assert [s.read() for _ in range(5)] == fixed(5)


@pytest.mark.skipif(not hasattr(os, "pread"), reason="needs os.pread (block reads map pages)")
def test_blocks_after_the_first_are_read_without_touching_the_mapping(tmp_path):
    """A block of the last block's tuple length is read with one pread and parsed from
    those bytes (the mapping's copy faults its pages in); another length is parsed from
    the mapping again."""
    runs = fixed(6) + [(b"%06d" % i, b"x" * 90) for i in range(6, 12)]
    s = opened(write(tmp_path / "s.bin", runs))
    assert list(s.read_block(3)) == runs[:3]
    mapping, s._buf = s._buf, None  # any read of the mapping would raise now
    assert list(s.read_block(3)) == runs[3:6]
    s._buf = mapping
    assert list(s.read_block(4)) == runs[6:10]  # another length
    s._buf = None
    assert list(s.read_block(2)) == runs[10:]
    s._buf = mapping
    assert s.position() == 12 and s.read_block(1) is None


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts /proc/self/fd")
def test_the_block_readers_descriptor_goes_with_close_or_with_the_store(tmp_path):
    """The input layers leave their stores to the garbage collector: a dropped store
    closes its descriptor as a closed one does, and a reopened one keeps one."""
    import gc

    path = write(tmp_path / "s.bin", fixed(20))

    def open_fds():
        gc.collect()
        return len(os.listdir("/proc/self/fd"))

    before = open_fds()
    for close in (True, False):
        for _ in range(20):
            s = opened(path)
            s.open(str(path), KREAD)  # again: the first descriptor is closed
            assert s.read_block(5) is not None
            if close:
                s.close()
            del s
        assert open_fds() == before
