"""textfile store: 0.3's test_store.cc expectations, line semantics, seek and append."""

import os

import pytest
from singa_builtins.stores.textfile import TextFileStore

from singa_core.errors import SingaError
from singa_core.store import KAPPEND, KCREATE, KREAD


def read_all(path):
    s = TextFileStore()
    s.open(str(path), KREAD)
    out = []
    while (r := s.read()) is not None:
        out.append(r)
    s.close()
    return out


def test_store_cc_textfile(tmp_path):
    path = str(tmp_path / "store.txt")
    s = TextFileStore()
    s.open(path, KCREATE)  # Open kCreate then kRead both succeed
    s.close()
    s.open(path, KREAD)
    assert s.read() is None
    s.close()

    s.open(path, KCREATE)
    assert s.write(b"001", b"first tuple")
    assert s.write(b"002", b"second tuple")
    s.flush()
    assert s.write(b"003", b"third tuple")
    s.close()

    s.open(path, KREAD)
    assert s.read() == (b"0", b"first tuple")
    assert s.read() == (b"1", b"second tuple")
    assert s.read() == (b"2", b"third tuple")
    assert s.read() is None
    s.seek_to_first()
    assert s.read() == (b"0", b"first tuple")
    s.close()


def test_write_ignores_key_and_adds_newline(tmp_path):
    path = tmp_path / "out.csv"
    s = TextFileStore()
    s.open(str(path), KCREATE)
    s.write(b"anything", b"12,3.2,1,14.1")
    s.write("", "2,0.2,0,1.1")
    s.write(b"k", b"")  # an empty line is a tuple too
    assert not s.write(b"k", b"two\nlines")
    s.close()
    assert path.read_bytes() == b"12,3.2,1,14.1\n2,0.2,0,1.1\n\n"
    assert read_all(path) == [(b"0", b"12,3.2,1,14.1"), (b"1", b"2,0.2,0,1.1"), (b"2", b"")]


def test_last_line_without_newline_and_crlf(tmp_path):
    path = tmp_path / "in.txt"
    path.write_bytes(b"a\r\n\nlast")
    assert read_all(path) == [(b"0", b"a\r"), (b"1", b""), (b"2", b"last")]


def test_missing_file(tmp_path):
    with pytest.raises(SingaError) as err:
        TextFileStore().open(str(tmp_path / "nope.txt"), KREAD)
    assert err.value.message.startswith("cannot open store") and err.value.help


def test_position_seek_and_keys(tmp_path):
    path = tmp_path / "lines.txt"
    path.write_bytes(b"".join(b"line %d\n" % i for i in range(6)))
    s = TextFileStore()
    s.open(str(path), KREAD)
    s.seek(4)
    assert s.read() == (b"4", b"line 4")
    assert s.position() == 5
    s.seek(1)
    assert s.read() == (b"1", b"line 1")
    s.seek(6)
    assert s.read() is None
    with pytest.raises(SingaError):
        s.seek(7)
    assert s.count() == 6
    s.seek_to_first()
    assert s.read() == (b"0", b"line 0")
    s.close()


def test_append(tmp_path):
    path = tmp_path / "log.txt"
    path.write_bytes(b"one\ntwo")  # no final newline
    s = TextFileStore()
    s.open(str(path), KAPPEND)
    s.write(b"", b"three")
    assert path.read_bytes() == b"one\ntwo"  # unchanged until close()
    s.close()
    assert path.read_bytes() == b"one\ntwo\nthree\n"
    fresh = tmp_path / "fresh.txt"
    s.open(str(fresh), KAPPEND)  # as in 0.3, appending to a missing file creates it
    s.write(b"", b"x")
    s.close()
    assert fresh.read_bytes() == b"x\n"
    assert sorted(os.listdir(tmp_path)) == ["fresh.txt", "log.txt"]


def test_failed_writer_leaves_nothing(tmp_path):
    with pytest.raises(KeyError):
        with TextFileStore() as s:
            s.open(str(tmp_path / "t.txt"), KCREATE)
            s.write(b"", b"partial")
            raise KeyError("boom")
    assert os.listdir(tmp_path) == []
