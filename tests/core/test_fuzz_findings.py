"""What the fuzz suite (tests/fuzz) found, pinned as plain regression tests."""

from __future__ import annotations

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


def test_a_long_run_of_backslashes_is_refused_quickly(tmp_path, monkeypatch):
    """protobuf's unescaping regex is quadratic in a run of backslashes: 40,000 took minutes."""
    conf = tmp_path / "job.conf"
    conf.write_text(MNIST.replace('name: "mlp"', 'name: "' + "\\\\" * 20_000 + '"'))
    from google.protobuf import text_encoding

    def quadratic(text, *a, **k):  # refused before protobuf unescapes anything
        raise AssertionError("the string reached protobuf's unescaping")

    monkeypatch.setattr(text_encoding, "CUnescape", quadratic)
    with pytest.raises(SingaError) as exc:
        load_job(conf)
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


def test_a_huge_unroll_len_is_refused_before_building(tmp_path, monkeypatch):
    """unroll_len 5000 built for minutes; 2**31 - 1 would never have finished."""
    text = (REPO / "examples" / "char-rnn" / "job.conf").read_text()
    conf = tmp_path / "job.conf"
    conf.write_text(text.replace("unroll_len: 50", "unroll_len: 2147483647", 1))
    from singa_core.layer import Layer

    def build(*a, **k):  # refused before any layer is made (not after minutes of making them)
        raise AssertionError("a layer was made")

    monkeypatch.setattr(Layer, "__init__", build)
    res = runner.invoke(app, ["train", str(conf), "--dry-run"])
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


# -- found by tests/fuzz/test_fuzz_commands.py (predict, export, data images; issue 30) --------
def test_predict_npy_bytes_named_npz_and_npz_named_npy(tmp_path):
    """np.load returns an array for an .npy whatever its name: was AttributeError 'files'."""
    import io

    import numpy as np

    from singa_core.inference.inputs import read_inputs

    buf = io.BytesIO()
    np.save(buf, np.ones((2, 4), np.float32))
    (tmp_path / "a.npz").write_bytes(buf.getvalue())
    with pytest.raises(SingaError, match="one .npy array, not the .npz archive"):
        read_inputs([tmp_path / "a.npz"], (4,))
    np.savez(tmp_path / "b.npz", x=np.ones((2, 4)))
    (tmp_path / "b.npz").rename(tmp_path / "b.npy")
    with pytest.raises(SingaError, match="an .npz archive, not the .npy array"):
        read_inputs([tmp_path / "b.npy"], (4,))


def test_predict_damaged_npz_member_is_located(tmp_path):
    """A member whose local header disagrees with the directory: was zipfile.BadZipFile."""
    import numpy as np

    from singa_core.inference.inputs import read_inputs

    np.savez(tmp_path / "c.npz", a=np.ones((2, 4)))
    data = bytearray((tmp_path / "c.npz").read_bytes())
    data[data.index(b"a.npy")] = ord("b")  # the first (local header) name only
    (tmp_path / "c.npz").write_bytes(bytes(data))
    with pytest.raises(SingaError) as exc:
        read_inputs([tmp_path / "c.npz"], (4,))
    assert exc.value.where == str(tmp_path / "c.npz")


def test_predict_non_utf8_csv_names_its_line(tmp_path):
    """Was UnicodeDecodeError."""
    from singa_core.inference.inputs import read_inputs

    (tmp_path / "x.csv").write_bytes(b"1,2,3,4\n\xb1,2,3,4\n")
    with pytest.raises(SingaError) as exc:
        read_inputs([tmp_path / "x.csv"], (4,))
    assert exc.value.where == f"{tmp_path / 'x.csv'}:2" and "not UTF-8" in exc.value.message


def test_output_name_too_long_is_located(tmp_path):
    """Was an error without a location."""
    from singa_core.running.fileio import output_target

    with pytest.raises(SingaError) as exc:
        output_target(tmp_path / ("x" * 300 + ".onnx"), "export")
    assert exc.value.where and "File name too long" in exc.value.message


def test_data_images_huge_label_warns_in_few_lines(tmp_path):
    """A list file label of 99999 made 99,999 empty classes: 17 MB of warning lines."""
    pytest.importorskip("PIL")
    from PIL import Image

    src = tmp_path / "src"
    src.mkdir()
    Image.new("RGB", (4, 4)).save(src / "a.png")
    (src / "listfile.txt").write_text("a.png 99999\n")
    res = runner.invoke(app, ["data", "images", str(src), "--out", str(tmp_path / "out")])
    warnings = [x for x in res.output.splitlines() if x.startswith("warning:")]
    assert len(warnings) == 11 and "99989 more classes are empty" in warnings[-1]


def test_data_images_argument_errors_are_located(tmp_path):
    """Were `error: singa data images: unrecognized arguments` without a location."""
    for extra, where in ((["--bogus"], "singa data images"), (["--val-fraction", "nan"],
                         "--val-fraction"), (["--resize", "0", "4"], "--resize")):  # fmt: skip
        res = runner.invoke(app, ["data", "images", str(tmp_path), "--out", str(tmp_path / "o"),
                                  *extra])  # fmt: skip
        assert res.exit_code == 2 and res.output.startswith(f"{where}: error: "), res.output


def test_predict_damaged_npy_header_is_located(tmp_path):
    """numpy's header parser raised tokenize.TokenError (or SyntaxError) for these."""
    from singa_core.inference.inputs import read_inputs

    for i, head in enumerate([b"{\x93NUMPY\x01\x00v\x00{'descr'", b"{'descr': '<f4'\x00"]):
        body = head.ljust(118) + b"\n"
        (tmp_path / f"{i}.npy").write_bytes(b"\x93NUMPY\x01\x00v\x00" + body + bytes(32))
        with pytest.raises(SingaError) as exc:
            read_inputs([tmp_path / f"{i}.npy"], (4,))
        assert exc.value.where == str(tmp_path / f"{i}.npy")


def test_data_images_encoded_jpeg_that_cannot_be_reencoded_is_skipped(tmp_path):
    """`--encoded --resize 100000 4` of a JPEG: re-encoding past JPEG's 65,500-pixel side
    was an OSError traceback ("broken data stream when writing image file")."""
    pytest.importorskip("PIL")
    from PIL import Image

    (tmp_path / "src" / "c0").mkdir(parents=True)
    Image.new("RGB", (4, 4), 9).save(tmp_path / "src" / "c0" / "0.jpg")
    args = ["data", "images", tmp_path / "src", "--out", tmp_path / "out", "--encoded"]
    res = runner.invoke(app, [*map(str, args), "--resize", "100000", "4"])
    assert res.exit_code == 2 and isinstance(res.exception, SystemExit), res.output
    assert "0.jpg: cannot be re-encoded (OSError" in res.output
    assert "none of the 1 images" in res.output and "Traceback" not in res.output
