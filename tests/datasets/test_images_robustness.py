"""`singa data images`, the cases issue 30 found: the job.conf written with --backend lmdb
trains (its mean file is an LMDB too, as kRecordInput reads mean_file with the data's
backend); a truncated data.mdb is a located exit 2 in training and in --dry-run (was a
SIGBUS, exit 135); a read-only --out is a located exit 2 (was OSError: [Errno 30]); an
empty class folder and an image over Pillow's decompression-bomb size are one warning line
each."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys

import numpy as np
import pytest
from conftest import invoke_singa, run_singa, singa_ok

Image = pytest.importorskip("PIL.Image")


def png_folder(root, data_dir, n=12, empty_class=None):
    raw = np.fromfile(data_dir / "cifar10" / "test_batch.bin", dtype=np.uint8, count=3073 * n)
    for i, r in enumerate(raw.reshape(n, 3073)):
        folder = root / f"c{r[0] % 3}"
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(r[1:].reshape(3, 32, 32).transpose(1, 2, 0)).save(folder / f"{i}.png")
    if empty_class:
        (root / empty_class).mkdir()
    return root


@pytest.fixture(scope="module")
def lmdb_out(data_dir, tmp_path_factory):
    pytest.importorskip("lmdb")
    tmp = tmp_path_factory.mktemp("lmdbconv")
    src = png_folder(tmp / "src", data_dir)
    out = tmp / "out"
    singa_ok("data", "images", src, "--out", out, "--backend", "lmdb", "--val-fraction", "0.25")
    return out


@pytest.mark.slow
def test_lmdb_job_conf_trains(lmdb_out, tmp_path):
    text = (lmdb_out / "job.conf").read_text()
    assert f'mean_file: "{lmdb_out / "mean_lmdb"}"' in text
    assert (lmdb_out / "mean_lmdb" / "data.mdb").is_file()
    assert (lmdb_out / "image_mean.bin").is_file()  # still there, for kRGBImage's meanfile
    res = run_singa(
        "train", str(lmdb_out / "job.conf"), "-o", "train_steps=3", "-o", "test_freq=2",
        "--workspace", str(tmp_path / "ws"),
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "Train step-" in res.stdout or "Test step-" in res.stdout


@pytest.mark.slow
def test_truncated_lmdb_is_a_located_exit_2(lmdb_out, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(lmdb_out, out)
    conf = out / "job.conf"
    conf.write_text((out / "job.conf").read_text().replace(str(lmdb_out), str(out)))
    data = out / "train_lmdb" / "data.mdb"
    os.truncate(data, data.stat().st_size - 4096)
    for extra in (["--dry-run"], ["-o", "train_steps=2"]):
        res = run_singa("train", str(conf), *extra, "--workspace", str(tmp_path / "ws"))
        assert res.returncode == 2, (extra, res.returncode, res.stderr)
        assert f"LMDB database {data} is truncated" in res.stderr
        assert "help:" in res.stderr and "Traceback" not in res.stderr


def test_read_only_out_is_a_located_exit_2(data_dir, tmp_path):
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare to mount a read-only filesystem privately")
    src = png_folder(tmp_path / "src", data_dir, n=4)
    ro = tmp_path / "ro"
    ro.mkdir()
    script = (
        f"mount -t tmpfs -o ro,size=64k tmpfs {ro} && exec {shlex.quote(sys.executable)} -m "
        f"singa_core.commands.cli data images {src} --out {ro}/out"
    )
    res = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 2, res.stderr
    assert f"cannot write into the output folder {ro}/out" in res.stderr
    assert "Read-only file system" in res.stderr and "help:" in res.stderr
    assert "Traceback" not in res.stderr


def test_read_only_out_folder_refused_before_converting(data_dir, tmp_path, monkeypatch):
    """The same without root: the probe file's EROFS, injected."""
    import errno
    import tempfile

    src = png_folder(tmp_path / "src", data_dir, n=4)

    def erofs(*a, **k):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(tempfile, "mkstemp", erofs)
    res = invoke_singa("data", "images", src, "--out", tmp_path / "out")
    assert res.exit_code == 2 and "Read-only file system" in res.output
    assert "decoding" not in res.output and "images of" not in res.output


def test_empty_class_folder_is_one_warning(data_dir, tmp_path):
    src = png_folder(tmp_path / "src", data_dir, n=6, empty_class="zebra")
    res = singa_ok("data", "images", src, "--out", tmp_path / "out")
    lines = [line for line in res.output.splitlines() if "zebra" in line]
    names = (tmp_path / "out" / "labels.txt").read_text().splitlines()
    assert len(lines) == 1, res.output
    assert lines[0].startswith(f"warning: class {names.index('zebra')} ('zebra') is empty")


def test_oversized_image_is_one_warning_line(data_dir, tmp_path, monkeypatch):
    src = png_folder(tmp_path / "src", data_dir, n=3)
    big = src / "c0" / "big.png"
    Image.new("RGB", (64, 64)).save(big)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 3000)  # 64x64 = 4096: over, under twice
    res = singa_ok("data", "images", src, "--out", tmp_path / "out", "--resize", "32", "32")
    lines = [line for line in res.output.splitlines() if "big.png" in line]
    assert len(lines) == 1 and lines[0].startswith("warning: ") and "64x64" in lines[0]
    assert "DecompressionBombWarning" not in res.output
