"""Outputs never replace what they should not (issue 30): every file singa writes goes
through fileio's writer, which refuses a device, FIFO, socket or folder at the target and
writes through a symlink (the link stays); export's --format and suffix must agree; the
command line checks --out/--output before any work."""

from __future__ import annotations

import os
import socket

import pytest
from conftest import REPO, run_singa

from singa_core.errors import SingaError
from singa_core.running.fileio import AtomicFile, atomic_write_bytes, output_target
from singa_core.running.reporting import Reporter

MNIST = REPO / "examples" / "mnist" / "job.conf"


def test_symlink_is_written_through_and_stays_a_link(tmp_path):
    real = tmp_path / "real.bin"
    real.write_bytes(b"old")
    link = tmp_path / "link.bin"
    link.symlink_to(real)
    atomic_write_bytes(link, b"new", "export")
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_bytes() == b"new"
    assert sorted(os.listdir(tmp_path)) == ["link.bin", "real.bin"]  # no temp file left


def test_dangling_symlink_creates_its_target(tmp_path):
    link = tmp_path / "link.bin"
    link.symlink_to(tmp_path / "made.bin")
    atomic_write_bytes(link, b"x")
    assert link.is_symlink() and (tmp_path / "made.bin").read_bytes() == b"x"


@pytest.mark.parametrize("kind", ["fifo", "socket", "folder", "device", "link-to-device"])
def test_non_regular_targets_are_refused_and_left_alone(tmp_path, kind):
    target = tmp_path / "out.onnx"
    sock = None
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(target))
    elif kind == "folder":
        target.mkdir()
    elif kind == "device":
        target = "/dev/null"
    else:
        target.symlink_to("/dev/null")
    try:
        with pytest.raises(SingaError) as info:
            atomic_write_bytes(target, b"data", "export")
        text = info.value.format()
        expected = {
            "fifo": "a FIFO", "socket": "a socket", "folder": "a folder",
            "device": "a character device", "link-to-device": "points to /dev/null",
        }[kind]  # fmt: skip
        assert expected in text and "help:" in text
        with pytest.raises(SingaError):
            AtomicFile(str(target), "file")
    finally:
        if sock is not None:
            sock.close()
    if kind == "link-to-device":
        assert target.is_symlink()
    assert os.path.exists("/dev/null") and not os.path.isfile("/dev/null")
    assert [p for p in os.listdir(tmp_path) if p.endswith(".tmp")] == []


def test_a_device_appearing_before_the_rename_is_not_replaced(tmp_path):
    target = tmp_path / "f.bin"
    out = AtomicFile(str(target), "file")
    out.write(b"abc")
    os.mkfifo(target)  # swapped in while the file was being written
    with pytest.raises(SingaError, match="FIFO"):
        out.commit()
    assert not target.is_file() and os.listdir(tmp_path) == ["f.bin"]


def test_metrics_file_that_is_a_fifo_is_refused(tmp_path):
    path = tmp_path / "metrics.jsonl"
    os.mkfifo(path)
    rep = Reporter(metrics_path=path, live=False, quiet=True, heartbeat_seconds=0)
    with pytest.raises(SingaError, match="FIFO"):
        rep.start(0, 10)  # would block forever opening a FIFO without a reader


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--out", "/dev/null"], "/dev/null: error: cannot write export /dev/null: it is a "
         "character device"),
        (["--out", "/dev/full", "--format", "onnx"], "it is a character device"),
        (["--out", "model.npz"], "cannot tell the export format of 'model.npz'"),
        (["--out", "model.npz", "--format", "onnx"], "--format onnx does not agree with --out"),
        (["--out", "m.onnx", "--format", "safetensors"], "which has suffix '.onnx'"),
        (["--out", "m", "--format", "onnx"], "which has no suffix"),
        (["--out", "m.onnx", "--format", "npz"], "unknown export format 'npz'"),
    ],
)  # fmt: skip
def test_export_refuses_devices_and_disagreeing_formats(tmp_path, args, message):
    res = run_singa("export", str(MNIST), *args, cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert message in res.stderr and "help:" in res.stderr and "Traceback" not in res.stderr
    assert os.listdir(tmp_path) == []


def test_predict_output_that_is_a_folder_is_refused_before_any_work(tmp_path):
    res = run_singa(
        "predict", str(MNIST), str(tmp_path / "x.npy"), "--output", str(tmp_path), cwd=tmp_path
    )
    assert res.returncode == 2 and "it is a folder" in res.stderr and "help:" in res.stderr


def test_output_target_of_a_plain_path(tmp_path):
    assert output_target(tmp_path / "new.bin") == str(tmp_path / "new.bin")
