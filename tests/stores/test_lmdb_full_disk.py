"""A full disk under an LMDB writer (issue 38, point 3): exit 2 naming the free space, and
nothing left behind — no `.train_lmdb.*` temp folder, no SIGBUS. The free space is what
``os.statvfs`` says (monkeypatched here); on a real 256 KiB tmpfs when this process may
mount one (else that test skips)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections import namedtuple

import numpy as np
import pytest
from conftest import REPO, invoke_singa

from singa_core.errors import SingaError
from singa_core.store import KCREATE

pytest.importorskip("lmdb")
Image = pytest.importorskip("PIL.Image")
from singa_builtins.stores.lmdb_store import LMDBStore  # noqa: E402

StatVFS = namedtuple("StatVFS", "f_bsize f_frsize f_blocks f_bfree f_bavail")


def _images(root, n=40, size=32):
    rng = np.random.default_rng(0)
    for c in ("a", "b"):
        (root / c).mkdir(parents=True)
        for i in range(n):
            img = rng.integers(0, 255, (size, size, 3), dtype=np.uint8)
            Image.fromarray(img).save(root / c / f"{i}.png")
    return root


def _free(monkeypatch, folder, free_bytes):
    """``os.statvfs`` of anything below ``folder`` says ``free_bytes`` are free."""
    real = os.statvfs

    def statvfs(path):
        if os.path.abspath(path).startswith(str(folder)):
            blocks = free_bytes // 4096
            return StatVFS(4096, 4096, blocks + 100, blocks, blocks)
        return real(path)

    monkeypatch.setattr(os, "statvfs", statvfs)


def _left(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


@pytest.mark.parametrize("free", [0, 20_000, 100_000, 250_000])
def test_singa_data_images_on_a_full_disk_exits_2_naming_the_free_space(
    tmp_path, monkeypatch, free
):
    src = _images(tmp_path / "imgs")
    out = tmp_path / "out"
    _free(monkeypatch, out, free)
    res = invoke_singa("data", "images", src, "--out", out, "--backend", "lmdb")
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output and "\nhelp: " in res.output
    assert f"{out / 'train_lmdb'}: error: no room for LMDB database" in res.output
    kib = free // 4096 * 4096 / 1024
    assert f"has {kib:.1f} KiB free" in res.output or f"has {free // 4096 * 4096} bytes free" in (
        res.output
    )
    assert _left(out) == [] and not (out / "train_lmdb").exists()


def test_the_store_removes_its_temp_folder_when_the_disk_fills_while_writing(tmp_path, monkeypatch):
    path = tmp_path / "db"
    store = LMDBStore()
    store.open(str(path), KCREATE)
    for i in range(500):  # committed in the first transaction (1000 puts) at close
        assert store.write(f"{i:05d}".encode(), bytes(3000))
    _free(monkeypatch, tmp_path, 64 << 10)  # the disk fills meanwhile
    with pytest.raises(SingaError, match=r"has 64\.0 KiB free, and the next 500 record"):
        store.close()
    assert _left(tmp_path) == [] and not path.exists()


def test_growing_the_map_checks_the_room_first(tmp_path, monkeypatch):
    from singa_builtins.stores import lmdb_store

    monkeypatch.setattr(lmdb_store, "_MAP0", 1 << 20)  # full after ~250 pages
    path = tmp_path / "db"
    store = LMDBStore()
    store.open(str(path), KCREATE)
    _free(monkeypatch, tmp_path, 900 << 10)  # room for the first map, not for more
    with pytest.raises(SingaError, match="no room for LMDB database"):
        for i in range(1000):
            store.write(f"{i:05d}".encode(), bytes(3000))
    assert _left(tmp_path) == [] and not path.exists()


TINY = 256 << 10


@pytest.fixture
def tiny_tmpfs(tmp_path):
    folder = tmp_path / "tiny"
    folder.mkdir()
    if not shutil.which("mount"):
        pytest.skip("no mount command")
    res = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={TINY}", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
    )
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


@pytest.mark.parametrize("filled_kib", [0, 120, 236, 250])
def test_a_real_256_kib_tmpfs(tiny_tmpfs, tmp_path, filled_kib):
    src = _images(tmp_path / "imgs", n=40, size=16)
    if filled_kib:
        (tiny_tmpfs / "filler").write_bytes(bytes(filled_kib << 10))
    out = tiny_tmpfs / "out"
    res = subprocess.run(
        [sys.executable, "-m", "singa_core.commands.cli", "data", "images", str(src),
         "--out", str(out), "--backend", "lmdb"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode in (0, 2), (res.returncode, res.stderr)  # never SIGBUS (135/-7)
    assert "Traceback" not in res.stderr
    if res.returncode == 2:
        assert "KiB free" in res.stderr or "bytes free" in res.stderr, res.stderr
    if out.exists():
        assert _left(out) == [], res.stderr
