"""What the fuzz suite (tests/fuzz) found, pinned as plain regression tests."""

from __future__ import annotations

import time

import pytest
from conftest import REPO
from typer.testing import CliRunner

from singa_core.commands.cli import app
from singa_core.errors import MAX_LINE, SingaError
from singa_core.jobconf.parse import load_job
from singa_core.running import checkpoint as ckpt

runner = CliRunner()
MNIST = (REPO / "examples" / "mnist" / "job.conf").read_text()


def test_non_utf8_job_conf_error_has_line_and_column(tmp_path):
    conf = tmp_path / "job.conf"
    conf.write_bytes(b'name: "a"\ntrain_steps: 1\n  \x80 bad\n')
    with pytest.raises(SingaError) as exc:
        load_job(conf)
    assert str(exc.value.where) == f"{conf}:3:3"  # was: no location


def test_a_long_run_of_backslashes_is_refused_quickly(tmp_path):
    """protobuf's unescaping regex is quadratic in a run of backslashes: 40,000 took minutes."""
    conf = tmp_path / "job.conf"
    conf.write_text(MNIST.replace('name: "mlp"', 'name: "' + "\\\\" * 20_000 + '"'))
    t0 = time.monotonic()
    with pytest.raises(SingaError) as exc:
        load_job(conf)
    assert time.monotonic() - t0 < 5
    assert "40000 backslashes in a row" in exc.value.message
    assert str(exc.value.where) == f"{conf}:6:8"  # the first backslash


def test_error_lines_do_not_echo_a_megabyte(tmp_path):
    """A 1 MB layer name came back whole in the 'known layers' help (a 1 MB message)."""
    conf = tmp_path / "job.conf"
    conf.write_text(MNIST.replace('name: "data"', 'name: "' + "x" * 1_000_000 + '"', 1))
    res = runner.invoke(app, ["train", str(conf), "--dry-run"])
    assert res.exit_code == 2
    assert "more characters)" in res.output
    assert max(len(line) for line in res.output.splitlines()) < MAX_LINE + 100


def test_empty_state_file_is_a_located_error(tmp_path):
    """np.load raised a bare EOFError on an empty .state.npz."""
    path = tmp_path / "step1-worker0.state.npz"
    path.write_bytes(b"")
    with pytest.raises(SingaError) as exc:
        ckpt.read_state(path)
    assert str(path) in exc.value.format()


def test_a_huge_unroll_len_is_refused_before_building(tmp_path):
    """unroll_len 5000 built for minutes; 2**31 - 1 would never have finished."""
    text = (REPO / "examples" / "char-rnn" / "job.conf").read_text()
    conf = tmp_path / "job.conf"
    conf.write_text(text.replace("unroll_len: 50", "unroll_len: 2147483647", 1))
    t0 = time.monotonic()
    res = runner.invoke(app, ["train", str(conf), "--dry-run"])
    assert time.monotonic() - t0 < 5
    assert res.exit_code == 2, res.output
    assert "unrolling makes 10,737,418,236 layers (at most 2,048)" in res.output
    assert f"{conf}:38:3: error:" in res.output  # neuralnet.unroll_len


def test_an_override_with_a_newline_is_located_on_one_line(tmp_path):
    conf = tmp_path / "job.conf"
    conf.write_text(MNIST)
    res = runner.invoke(app, ["train", str(conf), "--dry-run", "-o", "\n"])
    assert res.exit_code == 2
    assert res.output.startswith("command line: -o \\n: error: an override must look like")


@pytest.mark.parametrize(
    ("offset", "value"),
    [(8, 0x41), (8, 0x01), (6, 0x63)],  # flags: strong encryption, encrypted; version 9.9
    ids=["strong-encryption", "encrypted", "zip-version"],
)
def test_zip_features_numpy_cannot_read_are_a_located_error(tmp_path, offset, value):
    """zipfile raised NotImplementedError / RuntimeError for these headers."""
    import numpy as np

    data = bytearray(
        ckpt.encode_state(ckpt.TrainingState(step=1, arrays={"w": np.ones(2, np.float32)}))
    )
    for at in range(len(data) - 4):  # every central directory entry
        if data[at : at + 4] == b"PK\x01\x02":
            data[at + offset] = value
    path = tmp_path / "step1-worker0.state.npz"
    path.write_bytes(bytes(data))
    with pytest.raises(SingaError) as exc:
        ckpt.read_state(path)
    assert str(path) in exc.value.format()


def test_a_workspace_path_too_long_for_the_filesystem(tmp_path):
    """Path.exists() raised OSError(ENAMETOOLONG) for a 1 MB workspace name."""
    conf = tmp_path / "job.conf"
    conf.write_text(MNIST.replace('workspace: "', 'workspace: "' + "w" * 5000, 1))
    res = runner.invoke(app, ["train", str(conf), "--dry-run"])
    assert res.exit_code == 2, res.output
    assert "is too long for the filesystem" in res.output
    assert f"{conf}:" in res.output.splitlines()[0]
