"""Stores whose records carry no checksum say so (issue 30: byte flips inside them trained
silently): SINGA 0.3's plain kvfile tuples and LMDB databases give one SingaWarning per
store, which the singa command prints as one `warning:` line."""

from __future__ import annotations

import warnings

import pytest

from singa_core.errors import SingaWarning
from singa_core.plugin_host.host import get_host
from singa_core.store import KCREATE, KREAD
from tests.conftest import run_singa


def _kvfile(path, checksums: bool):
    store = get_host().get("store", "kvfile")()
    store.checksums = checksums
    store.open(str(path), KCREATE)
    for i in range(3):
        store.write(f"k{i}".encode(), b"value %d" % i)
    store.close()


def _read_all(path, backend="kvfile"):
    store = get_host().get("store", backend)()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        store.open(str(path), KREAD)
        while store.read() is not None:
            pass
        store.close()
    return [w for w in seen if issubclass(w.category, SingaWarning)]


def test_plain_kvfile_tuples_warn_once_and_checksummed_ones_do_not(tmp_path):
    _kvfile(tmp_path / "plain.bin", checksums=False)
    _kvfile(tmp_path / "checked.bin", checksums=True)
    (w,) = _read_all(tmp_path / "plain.bin")
    assert "records carry no checksum" in str(w.message) and "plain.bin" in str(w.message)
    assert _read_all(tmp_path / "checked.bin") == []


def test_lmdb_databases_warn_that_records_are_unchecked(tmp_path):
    pytest.importorskip("lmdb", reason="needs the lmdb extra")
    store = get_host().get("store", "lmdb")()
    store.open(str(tmp_path / "db"), KCREATE)
    store.write(b"k", b"v")
    store.close()
    (w,) = _read_all(tmp_path / "db", "lmdb")
    assert "LMDB records carry no checksum" in str(w.message)


def test_the_command_prints_one_warning_line(tmp_path, small_job):
    conf, ws = small_job(steps=5)
    data = tmp_path / "plain.bin"
    from singa_core.schema import common_pb2

    store = get_host().get("store", "kvfile")()
    store.checksums = False
    store.open(str(data), KCREATE)
    for i in range(40):
        rec = common_pb2.RecordProto(label=i % 3, data=[float(i % 3), 0.5, -0.5, 1.0])
        store.write(f"{i:05d}".encode(), rec.SerializeToString())
    store.close()
    text = conf.read_text()
    start = text.index('name: "data" type: kCSVInput')
    end = text.index("}\n  }", start) + 5
    text = (
        text[:start]
        + (
            f'name: "data" type: kRecordInput store_conf {{ backend: "kvfile" path: "{data}" '
            "batchsize: 20 shape: 4 }\n  }"
        )
        + text[end:]
    )
    conf.write_text(text)
    res = run_singa("train", str(conf), "--workspace", str(ws), "-q")
    assert res.returncode == 0, res.stderr
    lines = [x for x in res.stderr.splitlines() if x.startswith("warning: ")]
    assert len(lines) == 1 and "records carry no checksum" in lines[0], res.stderr


def test_an_lmdb_database_behind_a_link_is_written_through_it(tmp_path):
    pytest.importorskip("lmdb", reason="needs the lmdb extra")
    target = tmp_path / "real_db"
    link = tmp_path / "db"
    for path in (target,):
        store = get_host().get("store", "lmdb")()
        store.open(str(path), KCREATE)
        store.write(b"old", b"1")
        store.close()
    link.symlink_to(target)
    store = get_host().get("store", "lmdb")()
    store.open(str(link), KCREATE)
    store.write(b"new", b"2")
    store.close()
    assert link.is_symlink() and link.resolve() == target.resolve()
    reader = get_host().get("store", "lmdb")()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SingaWarning)
        reader.open(str(link), KREAD)
        keys = []
        while (rec := reader.read()) is not None:
            keys.append(rec[0])
        reader.close()
    assert keys == [b"new"]
