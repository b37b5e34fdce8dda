"""A truncated LMDB data file is refused before it is mapped (issue 30: reading its
missing pages was a SIGBUS, exit 135 without a word): its size against its own meta pages."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest
from singa_builtins.stores._lmdb_header import check_data_file
from singa_builtins.stores.lmdb_store import LMDBStore

from singa_core.errors import SingaError
from singa_core.store import KCREATE, KREAD

pytest.importorskip("lmdb")


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "db"
    s = LMDBStore()
    s.open(str(path), KCREATE)
    for i in range(3000):
        assert s.write(b"%06d" % i, os.urandom(600))
    s.close()
    return path


def test_a_whole_database_passes(db):
    check_data_file(str(db / "data.mdb"))


@pytest.mark.parametrize("keep", [0, 100, 4096, 4096 + 200, 2 * 4096, 0.5, 0.99, "-1"])
def test_every_truncation_is_refused_with_sizes(db, tmp_path, keep):
    data = db / "data.mdb"
    size = data.stat().st_size
    cut = {0.5: size // 2, 0.99: int(size * 0.99), "-1": size - 1}.get(keep, keep)
    os.truncate(data, cut)
    with pytest.raises(SingaError) as info:
        LMDBStore().open(str(db), KREAD)
    text = info.value.format()
    assert str(data) in text and "help:" in text
    if cut >= 2 * 4096:
        assert f"is truncated: {cut} bytes, but its header says it uses" in text
        assert f"({size} bytes" in text


def test_not_an_lmdb_file(tmp_path):
    f = tmp_path / "x.mdb"
    f.write_bytes(b"\x00" * 10000)
    with pytest.raises(SingaError, match="is not an LMDB database"):
        check_data_file(str(f))


def test_reading_a_truncated_database_in_a_process_is_no_sigbus(db):
    """The process ends with the located error, not killed by SIGBUS."""
    data = db / "data.mdb"
    os.truncate(data, data.stat().st_size // 2)
    code = textwrap.dedent(
        f"""
        from singa_builtins.stores.lmdb_store import LMDBStore
        from singa_core.errors import SingaError
        s = LMDBStore()
        try:
            s.open({str(db)!r}, 1)
            while s.read() is not None:
                pass
        except SingaError as e:
            print(e.message)
        """
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, (res.returncode, res.stderr)
    assert "is truncated" in res.stdout


def test_a_copy_of_a_whole_database_reads(db, tmp_path):
    shutil.copytree(db, tmp_path / "copy")
    s = LMDBStore()
    s.open(str(tmp_path / "copy"), KREAD)
    assert s.read()[0] == b"000000"
    s.close()
