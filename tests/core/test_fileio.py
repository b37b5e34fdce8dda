"""Atomic files: a failure never leaves a partial file or a stray temp file behind."""

from __future__ import annotations

import os

import pytest

from singa_core.errors import SingaError
from singa_core.plugin_host.host import get_host
from singa_core.running.fileio import AtomicFile, atomic_write_bytes
from singa_core.store import KAPPEND, KREAD


def test_atomic_write_creates_folder_and_replaces(tmp_path):
    target = tmp_path / "a" / "b" / "f.bin"
    atomic_write_bytes(target, b"one")
    atomic_write_bytes(target, b"two")
    assert target.read_bytes() == b"two"
    assert sorted(os.listdir(target.parent)) == ["f.bin"]


def test_fchmod_failure_leaks_nothing(tmp_path, monkeypatch):
    def boom(fd, mode):
        raise OSError(1, "Operation not permitted")

    monkeypatch.setattr(os, "fchmod", boom)
    with pytest.raises(SingaError):
        AtomicFile(str(tmp_path / "f"), "file")
    assert os.listdir(tmp_path) == []


def test_commit_after_failed_write_is_a_clear_error(tmp_path):
    target = tmp_path / "f"
    target.write_bytes(b"old")
    af = AtomicFile(str(target), "file")
    real = af.file

    class DiskFull:
        def write(self, data):
            raise OSError(28, "No space left on device")

        def close(self):
            real.close()

    af.file = DiskFull()
    with pytest.raises(SingaError):
        af.write(b"x" * 10)
    with pytest.raises(SingaError) as info:
        af.commit()
    assert "discarded" in info.value.message
    assert target.read_bytes() == b"old" and sorted(os.listdir(tmp_path)) == ["f"]


def test_failed_append_open_keeps_the_old_store(tmp_path, monkeypatch):
    path = tmp_path / "data.txt"
    path.write_bytes(b"a\nb\n")
    store = get_host().get("store", "textfile")()
    import singa_builtins.stores.textfile as textfile

    def unreadable(*a, **k):
        raise SingaError("cannot open store: permission denied")

    monkeypatch.setattr(textfile, "map_file", unreadable)
    with pytest.raises(SingaError):
        store.open(str(path), KAPPEND)
    store.close()  # must not replace the file with a partial copy
    assert path.read_bytes() == b"a\nb\n"
    assert sorted(os.listdir(tmp_path)) == ["data.txt"]
    monkeypatch.undo()
    store.open(str(path), KREAD)
    assert store.read() == (b"0", b"a")
    store.close()
