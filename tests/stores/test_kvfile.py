"""kvfile store: 0.3's test_kvfile.cc / test_store.cc expectations, byte layout, errors."""

import os
import struct
import time

import pytest
from singa_builtins.stores.kvfile import KVFileStore

from singa_core.errors import SingaError
from singa_core.plugin_host.discovery import iter_submodule_types
from singa_core.store import KAPPEND, KCREATE, KREAD, Store


@pytest.fixture(autouse=True)
def _plain_tuples(monkeypatch):
    """These tests check 0.3's layout byte for byte: written without singa's per-record
    checksums (those: test_kvfile_checksums.py)."""
    monkeypatch.setenv("SINGA_KVFILE_CHECKSUMS", "0")


def tup(key: bytes, val: bytes) -> bytes:
    """One tuple, built by hand: [u64 LE key_len][key][u64 LE val_len][val]."""
    return struct.pack("<Q", len(key)) + key + struct.pack("<Q", len(val)) + val


def create(path, tuples):
    s = KVFileStore()
    s.open(str(path), KCREATE)
    for k, v in tuples:
        assert s.write(k, v)
    s.close()


def read_all(path):
    s = KVFileStore()
    s.open(str(path), KREAD)
    out = []
    while (r := s.read()) is not None:
        out.append(r)
    s.close()
    return out


def test_registered_as_kvfile():
    assert KVFileStore in list(iter_submodule_types("singa_builtins.stores", Store))
    assert KVFileStore.type_names == ("kvfile",)


def test_kvfile_cc_create_append_count_read(tmp_path):
    """test_kvfile.cc: create 3 tuples, append 2, Count()==5, read in order, SeekToFirst."""
    path = tmp_path / "kvfile.bin"
    s = KVFileStore()
    s.open(str(path), KCREATE)
    assert s.write(b"firstkey", b"firsttuple")
    assert s.write(b"secondkey", b"2th-tuple")
    assert s.write(b"thirdkey", b"3th-tuple")
    s.flush()
    s.close()

    s.open(str(path), KAPPEND)
    assert s.write(b"fourthkey", b"4th-tuple")
    assert s.write(b"fifthkey", b"5th-tuple")
    s.flush()
    s.close()

    s.open(str(path), KREAD)
    assert s.count() == 5
    expected = [
        (b"firstkey", b"firsttuple"),
        (b"secondkey", b"2th-tuple"),
        (b"thirdkey", b"3th-tuple"),
        (b"fourthkey", b"4th-tuple"),
        (b"fifthkey", b"5th-tuple"),
    ]
    for want in expected:
        assert s.read() == want
    assert s.read() is None
    s.seek_to_first()
    assert s.read() == (b"firstkey", b"firsttuple")
    s.close()


def test_store_cc_kvfile(tmp_path):
    """test_store.cc (kvfile part): keys 001..003, flush in the middle, read back, rewind."""
    path = str(tmp_path / "store.bin")
    s = KVFileStore()
    s.open(path, KCREATE)
    s.close()
    s.open(path, KREAD)  # an empty store opens and has no tuples
    assert s.read() is None
    s.close()

    s.open(path, KCREATE)
    assert s.write(b"001", b"first tuple")
    assert s.write(b"002", b"second tuple")
    s.flush()
    assert s.write(b"003", b"third tuple")
    s.close()

    s.open(path, KREAD)
    assert s.read() == (b"001", b"first tuple")
    assert s.read() == (b"002", b"second tuple")
    assert s.read() == (b"003", b"third tuple")
    assert s.read() is None
    s.seek_to_first()
    assert s.read() == (b"001", b"first tuple")
    s.close()


def test_exact_byte_layout(tmp_path):
    path = tmp_path / "x.bin"
    create(path, [(b"001", b"first tuple"), (b"", b"\x00\xff"), ("k\u00e9y", b"v")])
    assert path.read_bytes() == (
        b"\x03\x00\x00\x00\x00\x00\x00\x00001"
        b"\x0b\x00\x00\x00\x00\x00\x00\x00first tuple"
        + b"\x00" * 8
        + b"\x02\x00\x00\x00\x00\x00\x00\x00\x00\xff"
        + tup("k\u00e9y".encode(), b"v")
    )


def test_reads_hand_built_file_and_shard_dat_fallback(tmp_path):
    data = tup(b"a", b"1") + tup(b"bb", b"22" * 300) + tup(b"ccc", b"\n\x00")
    (tmp_path / "f.bin").write_bytes(data)
    want = [(b"a", b"1"), (b"bb", b"22" * 300), (b"ccc", b"\n\x00")]
    assert read_all(tmp_path / "f.bin") == want
    shard = tmp_path / "old_shard"
    shard.mkdir()
    (shard / "shard.dat").write_bytes(data)  # SINGA 0.1 DataShard folder
    assert read_all(shard) == want


def test_missing_file(tmp_path):
    with pytest.raises(SingaError) as err:
        KVFileStore().open(str(tmp_path / "nope.bin"), KREAD)
    assert err.value.message.startswith("cannot open store")
    assert "nope.bin" in err.value.message and err.value.help


@pytest.mark.parametrize(
    "tail, what",
    [
        (b"\x05\x00\x00", "8-byte key length"),  # cut inside a key length
        (struct.pack("<Q", 1 << 40) + b"key", "key length"),  # absurd key length
        (struct.pack("<Q", 3) + b"key" + struct.pack("<Q", 100) + b"short", "value length"),
        (struct.pack("<Q", 3) + b"key" + struct.pack("<Q", 0), "empty value"),
    ],
)
def test_corrupt_file_names_path_and_offset(tmp_path, tail, what):
    good = tup(b"k1", b"v1") + tup(b"k2", b"value2")
    path = tmp_path / "bad.bin"
    path.write_bytes(good + tail)
    s = KVFileStore()
    s.open(str(path), KREAD)
    assert s.read() == (b"k1", b"v1")
    assert s.read() == (b"k2", b"value2")
    with pytest.raises(SingaError) as err:
        s.read()
    e = err.value
    assert f"byte offset {len(good)}" in e.message and what in e.message
    assert str(e.where) == str(path) and e.help
    assert str(path) in e.format()
    s.close()
    # count() validates the whole file
    s.open(str(path), KREAD)
    with pytest.raises(SingaError):
        s.count()
    s.close()


def test_append_truncates_partial_tail_and_rejects_known_keys(tmp_path):
    path = tmp_path / "a.bin"
    full = tup(b"k1", b"v1") + tup(b"k2", b"v2")
    path.write_bytes(full + tup(b"k3", b"v3")[:-1])  # crash in the middle of tuple 3
    s = KVFileStore()
    s.open(str(path), KAPPEND)
    assert not s.write(b"k1", b"again")  # key already in the file
    assert not s.write(b"new", b"")  # empty value
    assert s.write(b"k3", b"v3")  # the dropped partial tuple's key is free again
    assert s.write(b"k4", b"v4")
    assert s.write(b"k4", b"dup")  # duplicates within one session are not detected (0.3)
    s.close()
    assert path.read_bytes() == full + tup(b"k3", b"v3") + tup(b"k4", b"v4") + tup(b"k4", b"dup")


def test_append_to_missing_file_is_an_error(tmp_path):
    with pytest.raises(SingaError) as err:
        KVFileStore().open(str(tmp_path / "none.bin"), KAPPEND)
    assert "kCreate" in err.value.help


def test_create_is_atomic(tmp_path):
    path = tmp_path / "data.bin"
    create(path, [(b"old", b"contents")])
    before = path.read_bytes()
    s = KVFileStore()
    s.open(str(path), KCREATE)
    s.write(b"new", b"x" * 100)
    s.flush()
    assert path.read_bytes() == before  # nothing visible before close()
    s.close()
    assert read_all(path) == [(b"new", b"x" * 100)]
    assert sorted(os.listdir(tmp_path)) == ["data.bin"]  # no temp file left


def test_failed_writer_leaves_old_file(tmp_path):
    path = tmp_path / "data.bin"
    create(path, [(b"old", b"contents")])
    with pytest.raises(RuntimeError):
        with KVFileStore() as s:
            s.open(str(path), KCREATE)
            s.write(b"half", b"done")
            raise RuntimeError("converter crashed")
    assert read_all(path) == [(b"old", b"contents")]
    assert sorted(os.listdir(tmp_path)) == ["data.bin"]
    # a store dropped without close() is not published either
    s = KVFileStore()
    s.open(str(tmp_path / "other.bin"), KCREATE)
    s.write(b"k", b"v")
    del s
    assert sorted(os.listdir(tmp_path)) == ["data.bin"]


def test_create_in_missing_folder(tmp_path):
    with pytest.raises(SingaError) as err:
        KVFileStore().open(str(tmp_path / "no" / "x.bin"), KCREATE)
    assert "does not exist" in err.value.message and "mkdir" in err.value.help


def test_position_and_seek(tmp_path):
    path = tmp_path / "p.bin"
    create(path, [(b"%03d" % i, b"v%d" % i) for i in range(10)])
    s = KVFileStore()
    s.open(str(path), KREAD)
    s.seek(7)  # before anything was read: indexes lazily
    assert s.position() == 7
    assert s.read() == (b"007", b"v7")
    s.seek(2)
    assert [s.read()[0] for _ in range(3)] == [b"002", b"003", b"004"]
    assert s.position() == 5
    s.seek(10)
    assert s.read() is None
    with pytest.raises(SingaError) as err:
        s.seek(11)
    assert "only 10 records" in err.value.message
    # resume in a new store object from a saved position
    s.seek(4)
    pos = s.position()
    s.close()
    t = KVFileStore()
    t.open(str(path), KREAD)
    t.seek(pos)
    assert t.read() == (b"004", b"v4")
    t.close()


def test_read_is_fast_on_a_large_file(tmp_path):
    """~50 MB like MNIST train: 64 sequential reads must cost well under 1 ms."""
    path = tmp_path / "big.bin"
    val = bytes(range(256)) * 3 + bytes(16)  # ~800 bytes, like an MNIST record
    s = KVFileStore()
    s.open(str(path), KCREATE)
    for i in range(60000):
        s.write(b"%08d" % i, val)
    s.close()
    s.open(str(path), KREAD)
    best = float("inf")
    for _ in range(50):
        t0 = time.perf_counter()
        for _ in range(64):
            r = s.read()
            if r is None:
                s.seek_to_first()
        best = min(best, time.perf_counter() - t0)
    assert r[1] == val
    assert best < 1e-3
    assert s.count() == 60000
    s.close()


def test_wrong_mode(tmp_path):
    path = str(tmp_path / "m.bin")
    s = KVFileStore()
    with pytest.raises(SingaError):
        s.read()  # not open
    s.open(path, KCREATE)
    with pytest.raises(SingaError):
        s.read()
    s.close()
    s.open(path, KREAD)
    with pytest.raises(SingaError) as err:
        s.write(b"k", b"v")
    assert "kCreate" in err.value.help
    s.close()
