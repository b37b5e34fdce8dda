"""The lmdb store: write/read/seek/count, kAppend, duplicate and empty values refused, the
map grown on demand, atomic publication (an aborted writer leaves the old database), one
environment shared by several readers, located errors; kRecordInput reading an LMDB of
RecordProtos (`singa data images --backend lmdb`)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from singa_builtins.stores import lmdb_store
from singa_builtins.stores.lmdb_store import LMDBStore

from singa_core.errors import SingaError
from singa_core.plugin_host.host import get_host
from singa_core.store import KAPPEND, KCREATE, KREAD

pytest.importorskip("lmdb")


def write(path, n, size=10, mode=KCREATE):
    s = LMDBStore()
    s.open(str(path), mode)
    for i in range(n):
        assert s.write(b"%06d" % i, bytes([i % 256]) * size)
    s.close()


def read_all(path):
    s = LMDBStore()
    s.open(str(path), KREAD)
    out = []
    while (rec := s.read()) is not None:
        out.append(rec)
    s.close()
    return out


def test_registered_and_round_trip(tmp_path):
    assert get_host().get("store", "lmdb") is LMDBStore
    write(tmp_path / "db", 30)
    assert sorted(os.listdir(tmp_path)) == ["db"]  # no temp folder left
    recs = read_all(tmp_path / "db")
    assert [k for k, _ in recs] == [b"%06d" % i for i in range(30)]
    s = LMDBStore()
    s.open(str(tmp_path / "db"), KREAD)
    assert s.count() == 30 and s.position() == 0
    s.read()
    s.read()
    assert s.position() == 2
    s.seek(25)
    assert s.read()[0] == b"000025" and s.position() == 26
    s.seek(3)
    assert s.read()[0] == b"000003"
    s.seek_to_first()
    assert s.read()[0] == b"000000"
    with pytest.raises(SingaError, match="only 30 records"):
        s.seek(31)
    with pytest.raises(SingaError, match="not open in a mode"):
        s.write(b"x", b"y")
    s.close()


def test_refusals_append_and_growth(tmp_path, monkeypatch):
    monkeypatch.setattr(lmdb_store, "_MAP0", 1 << 16)  # 64 KiB: grown many times below
    s = LMDBStore()
    s.open(str(tmp_path / "db"), KCREATE)
    assert s.write(b"a", b"1") and not s.write(b"a", b"2") and not s.write(b"b", b"")
    for i in range(300):
        assert s.write(b"big%04d" % i, os.urandom(2000))
    s.close()
    assert len(read_all(tmp_path / "db")) == 301
    s = LMDBStore()
    s.open(str(tmp_path / "db"), KAPPEND)
    assert not s.write(b"a", b"3") and s.write(b"zz", b"4")
    s.close()
    recs = dict(read_all(tmp_path / "db"))
    assert len(recs) == 302 and recs[b"a"] == b"1" and recs[b"zz"] == b"4"


def test_aborted_writer_leaves_the_old_database(tmp_path):
    write(tmp_path / "db", 5)
    s = LMDBStore()
    s.open(str(tmp_path / "db"), KCREATE)
    s.write(b"new", b"x")
    s.abort()
    assert len(read_all(tmp_path / "db")) == 5
    with pytest.raises(RuntimeError):
        with LMDBStore() as s:
            s.open(str(tmp_path / "db"), KCREATE)
            s.write(b"new", b"x")
            raise RuntimeError("boom")
    assert len(read_all(tmp_path / "db")) == 5
    assert sorted(os.listdir(tmp_path)) == ["db"]


def test_readers_share_one_environment(tmp_path):
    write(tmp_path / "db", 4)
    a, b = LMDBStore(), LMDBStore()
    a.open(str(tmp_path / "db"), KREAD)
    b.open(str(tmp_path / "db"), KREAD)  # LMDB allows one open per process: shared
    assert a.read()[0] == b"000000" and a.read()[0] == b"000001"
    assert b.read()[0] == b"000000"  # its own cursor
    a.close()
    assert b.read()[0] == b"000001"
    b.close()
    assert os.path.realpath(tmp_path / "db") not in lmdb_store._READERS  # closed with the last


def test_errors(tmp_path):
    s = LMDBStore()
    with pytest.raises(SingaError, match="no such folder"):
        s.open(str(tmp_path / "missing"), KREAD)
    with pytest.raises(SingaError, match="folder .* does not exist"):
        s.open(str(tmp_path / "no" / "db"), KCREATE)
    with pytest.raises(SingaError, match="for appending"):
        s.open(str(tmp_path / "missing"), KAPPEND)
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "data.mdb").write_bytes(b"\x01" * 20000)
    with pytest.raises(SingaError) as exc:
        s.open(str(junk), KREAD)
    assert str(junk) in str(exc.value.where) and "help" not in exc.value.message
    assert exc.value.help


def test_record_input_reads_an_images_lmdb(tmp_path, data_dir):
    """`singa data images --backend lmdb` -> kRecordInput with backend "lmdb"."""
    pytest.importorskip("PIL")
    from conftest import singa_ok
    from PIL import Image
    from singa_builtins.layers.record_input import RecordInputLayer

    from singa_core.layer import kForward, kTrain
    from singa_core.testing import layer_conf, make_ctx

    raw = np.fromfile(data_dir / "cifar10" / "test_batch.bin", dtype=np.uint8, count=3073 * 12)
    raw = raw.reshape(12, 3073)
    for i, r in enumerate(raw):
        (tmp_path / "src" / f"c{r[0]}").mkdir(parents=True, exist_ok=True)
        Image.fromarray(r[1:].reshape(3, 32, 32).transpose(1, 2, 0)).save(
            tmp_path / "src" / f"c{r[0]}" / f"{i}.png"
        )
    out = tmp_path / "out"
    singa_ok("data", "images", tmp_path / "src", "--out", out, "--backend", "lmdb")
    assert (out / "train_lmdb" / "data.mdb").is_file()
    assert 'backend: "lmdb"' in (out / "job.conf").read_text()
    conf = layer_conf(
        f'name: "d" type: kRecordInput store_conf {{ backend: "lmdb" batchsize: 12 '
        f'path: "{out / "train_lmdb"}" shape: 3 shape: 32 shape: 32 }}'
    )
    layer = RecordInputLayer(conf, make_ctx(0, get_plugin=get_host().get, phase=kTrain))
    layer.setup([])
    layer.forward(kTrain | kForward, [])
    got = sorted(map(bytes, layer.data.astype(np.uint8).reshape(12, -1)))
    assert got == sorted(bytes(r[1:]) for r in raw)
