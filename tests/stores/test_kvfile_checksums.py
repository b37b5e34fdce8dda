"""kvfile's per-record checksums (issue 30): every tuple singa writes carries a CRC-32 of
itself (bit 63 of key_len says so); a flipped byte anywhere in a record, a changed shape
field included, is an error naming the file, record, key and offset; 0.3's plain tuples
still read, also mixed with checksummed ones in one file; converters write checksums."""

from __future__ import annotations

import struct
import zlib

import pytest
from conftest import run_singa, write_csv_blobs
from singa_builtins.stores.kvfile import KVFileStore

from singa_core.errors import SingaError
from singa_core.schema import common_pb2
from singa_core.store import KAPPEND, KCREATE, KREAD

CHECKED = 1 << 63


def plain(key: bytes, val: bytes) -> bytes:
    return struct.pack("<Q", len(key)) + key + struct.pack("<Q", len(val)) + val


def checked(key: bytes, val: bytes) -> bytes:
    t = struct.pack("<Q", len(key) | CHECKED) + key + struct.pack("<Q", len(val)) + val
    return t + struct.pack("<I", zlib.crc32(t))


def write(path, tuples):
    s = KVFileStore()
    s.open(str(path), KCREATE)
    for k, v in tuples:
        assert s.write(k, v)
    s.close()


def read_all(path):
    s = KVFileStore()
    s.open(str(path), KREAD)
    try:
        out = []
        while (r := s.read()) is not None:
            out.append(r)
        return out
    finally:
        s.close()


def test_written_layout_is_checksummed(tmp_path):
    path = tmp_path / "x.bin"
    write(path, [(b"001", b"first tuple"), (b"k2", b"\x00\xff")])
    assert path.read_bytes() == checked(b"001", b"first tuple") + checked(b"k2", b"\x00\xff")
    assert read_all(path) == [(b"001", b"first tuple"), (b"k2", b"\x00\xff")]


def test_every_flipped_byte_of_a_record_is_found(tmp_path):
    path = tmp_path / "x.bin"
    tuples = [(b"%03d" % i, bytes(range(i, i + 40))) for i in range(3)]
    write(path, tuples)
    good = path.read_bytes()
    size = len(checked(b"000", tuples[0][1]))
    start = size  # the second record
    for pos in range(start, start + size):
        bad = bytearray(good)
        bad[pos] ^= 0x10
        path.write_bytes(bytes(bad))
        with pytest.raises(SingaError) as info:
            read_all(path)
        text = info.value.format()
        assert str(path) in text, pos
        if 8 <= pos - start < size - 4 and not 8 + 3 <= pos - start < 8 + 3 + 8:
            # a flip in the key or value (not in a length): the checksum names the record
            assert "record 1 (key '001'" in text or "record 1 (key" in text, text
            assert f"at byte offset {start}" in text and "fails its checksum" in text


def test_changed_shape_field_of_a_record_is_found(tmp_path):
    path = tmp_path / "recs.bin"
    rec = common_pb2.RecordProto(shape=[1, 28, 28], label=3, pixel=bytes(784))
    write(path, [(b"00000", rec.SerializeToString())] * 1 + [(b"00001", rec.SerializeToString())])
    data = bytearray(path.read_bytes())
    at = data.index(b"\x08\x01\x08\x1c\x08\x1c")  # shape 1, 28, 28
    data[at + 3] = 14  # shape 28 -> 14: a well-formed record, silently wrong without a CRC
    path.write_bytes(bytes(data))
    with pytest.raises(SingaError, match=r"record 0 \(key '00000'\).*fails its checksum"):
        read_all(path)


def test_03_tuples_still_read_and_mix_with_checksummed_ones(tmp_path):
    path = tmp_path / "old.bin"
    path.write_bytes(plain(b"a", b"1") + plain(b"bb", b"22"))
    assert read_all(path) == [(b"a", b"1"), (b"bb", b"22")]
    s = KVFileStore()
    s.open(str(path), KAPPEND)
    assert not s.write(b"a", b"dup")  # keys of either kind are known
    assert s.write(b"c", b"3")
    s.close()
    assert path.read_bytes() == plain(b"a", b"1") + plain(b"bb", b"22") + checked(b"c", b"3")
    assert read_all(path) == [(b"a", b"1"), (b"bb", b"22"), (b"c", b"3")]
    s.open(str(path), KREAD)
    assert s.count() == 3
    s.seek(2)
    assert s.read() == (b"c", b"3")
    s.close()


def test_truncated_checksum_is_a_located_error(tmp_path):
    path = tmp_path / "x.bin"
    write(path, [(b"k", b"value")])
    path.write_bytes(path.read_bytes()[:-2])
    with pytest.raises(SingaError, match="runs past the end of the file"):
        read_all(path)


def test_opt_out_writes_03_tuples(tmp_path, monkeypatch):
    monkeypatch.setenv("SINGA_KVFILE_CHECKSUMS", "0")
    path = tmp_path / "x.bin"
    write(path, [(b"k", b"v")])
    assert path.read_bytes() == plain(b"k", b"v")


def test_damaged_record_in_training_data_is_a_located_exit_2(tmp_path, small_job):
    """A kvfile of records converted from CSV blobs, one byte flipped: training stops
    with exit 2 naming the file and the record's key, no traceback."""
    import numpy as np

    blobs = write_csv_blobs(tmp_path / "blobs.csv")
    rows = np.loadtxt(blobs, delimiter=",", dtype=np.float32)
    store = tmp_path / "train.bin"
    write(
        store,
        [
            (
                b"%05d" % i,
                common_pb2.RecordProto(
                    shape=[4], label=int(r[0]), data=r[1:].tolist()
                ).SerializeToString(),
            )
            for i, r in enumerate(rows)
        ],
    )
    data = bytearray(store.read_bytes())
    data[data.index(b"00010") + 20] ^= 0x01  # inside record 10's value: a float changes
    store.write_bytes(bytes(data))
    conf, _ = small_job(steps=20)
    text = conf.read_text().replace("kCSVInput", "kRecordInput")
    text = text.replace('backend: "textfile"', 'backend: "kvfile"').replace(str(blobs), str(store))
    text = text.replace("random_skip: 10", "")
    conf.write_text(text)
    res = run_singa("train", str(conf))
    assert res.returncode == 2, res.stdout + res.stderr
    assert str(store) in res.stderr and "fails its checksum" in res.stderr
    assert "key '" in res.stderr and "help:" in res.stderr and "Traceback" not in res.stderr
