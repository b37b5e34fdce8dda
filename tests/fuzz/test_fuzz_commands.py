"""Fuzzing `singa predict`, `singa export` and `singa data images` (issue 30 point 6),
`singa new-plugin`'s output folders and `singa plot`'s inputs (issue 38 point 4): their
arguments and the files they read, long names (300 bytes) among them. Every case, in-process
through the CLI's own entry point, ends with exit 0 or a located exit 2 (``WHERE: error:
WHAT``, no traceback) within 5 s of CPU time; predict never prints a ``nan`` probability; no
device, FIFO or folder given as an output is replaced (/dev/null stays a device, the planted
FIFO and folder stay).
"""

from __future__ import annotations

import io
import os
import re
import shutil
import stat
import struct
import zlib

import numpy as np
import pytest
from conftest import mlp_conf, write_csv_blobs
from fuzzing import (
    EXTREME_NUMBERS,
    Hang,
    assert_run_or_located_error,
    byte_mutation,
    count,
    fuzz_settings,
    time_limit,
    write_counts,
)
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from singa_core.commands.cli import app

runner = CliRunner()
LONG = "x" * 300  # a name over the filesystem's 255 bytes
SUFFIXES = [".npy", ".npz", ".csv", ".txt", ".bin", ".png", ".jpg", "", ".onnx", ".safetensors"]


def assert_clean(res) -> str:
    """:func:`assert_run_or_located_error`: exit 0, or the one form of a user error
    (``WHERE: error: WHAT`` and ``help:``), click's own parse errors included (issue 46: an
    option value of the wrong type was click's ``Usage: ... Error: ...`` block)."""
    return assert_run_or_located_error(res)


def _invoke(args):
    try:
        with time_limit():
            res = runner.invoke(app, [str(a) for a in args])
    except Hang as exc:
        raise AssertionError(f"hang: {exc}: {args}") from None
    if isinstance(res.exception, Hang):
        raise AssertionError(f"hang: {res.exception}: {args}")
    return res


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A folder with planted outputs: a FIFO, a folder, a link to /dev/null."""
    d = tmp_path_factory.mktemp("commands")
    planted = d / "planted"
    planted.mkdir()
    os.mkfifo(planted / "fifo.jsonl")
    (planted / "folder.onnx").mkdir()
    (planted / "link.csv").symlink_to("/dev/null")
    yield d
    write_counts()


@pytest.fixture(scope="module")
def model(workdir):
    """A trained small MLP (4 inputs, 3 classes) in ``workdir``."""
    d = workdir
    conf = d / "job.conf"
    conf.write_text(mlp_conf(write_csv_blobs(d / "blobs.csv"), d / "ws", steps=20))
    res = runner.invoke(app, ["train", str(conf), "-q", "--no-tensorboard"])
    assert res.exit_code == 0, res.output
    return conf, d


@pytest.fixture(scope="module")
def fifo_ws(model):
    """A copy of the trained workspace whose newest checkpoint file is a named pipe (with
    its manifest and state), and a FIFO where a job.conf is expected (issue 46, point 1)."""
    conf, d = model
    ws = d / "fifows"
    if not ws.exists():
        shutil.copytree(d / "ws", ws)
        newest = max(
            (f for f in (ws / "checkpoint").iterdir() if re.fullmatch(r"step\d+-worker0", f.name)),
            key=lambda f: int(f.name[4:].split("-")[0]),
        )
        newest.unlink()
        os.mkfifo(newest)
        os.mkfifo(d / "planted" / "fifo.conf")
    return ws


def _fifo_paths(d):
    ws = d / "fifows"
    fifo = next(f for f in (ws / "checkpoint").iterdir() if stat.S_ISFIFO(os.lstat(f).st_mode))
    return [ws, ws / "checkpoint", fifo, d / "planted" / "fifo.jsonl"]


def _outputs_intact(d) -> None:
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode), "/dev/null was replaced"
    assert stat.S_ISFIFO(os.stat(d / "planted" / "fifo.jsonl").st_mode)
    assert (d / "planted" / "folder.onnx").is_dir()
    assert (d / "planted" / "link.csv").is_symlink()


def _out_names(d):
    planted = d / "planted"
    return st.one_of(
        st.sampled_from(
            [
                "/dev/null",
                "/dev/full",
                planted / "fifo.jsonl",
                planted / "folder.onnx",
                planted / "link.csv",
                planted,
                d / "no" / "such" / "dir" / "p.jsonl",
            ]
        ),  # fmt: skip
        st.builds(
            lambda stem, suffix: d / "out" / f"{stem}{suffix}",
            st.sampled_from(["p", "model", ".hidden", "x" * 300, "a b", "é"]),
            st.sampled_from([*SUFFIXES, ".JSONL", ".jsonl", ".npz.tmp", ".CSV"]),
        ),
    )


# -- predict: arguments ----------------------------------------------------------------------
@pytest.mark.slow
@fuzz_settings(40)
@given(data=st.data())
def test_predict_arguments(model, fifo_ws, data):
    conf, d = model
    (d / "out").mkdir(exist_ok=True)
    sample = d / "ok.npy"
    if not sample.exists():
        np.save(sample, np.ones((3, 4), np.float32))
    args = ["predict", conf, sample]
    for _ in range(data.draw(st.integers(0, 4))):
        opt = data.draw(st.sampled_from(["--top-k", "--output", "--checkpoint", "--sample-shape",
                                         "--labels", "--resize", "-o", "--workspace"]))  # fmt: skip
        if opt == "--top-k":
            args += [opt, data.draw(st.sampled_from(EXTREME_NUMBERS) | st.integers(-5, 9).map(str))]
        elif opt == "--output":
            args += [opt, data.draw(_out_names(d))]
        elif opt in ("--checkpoint", "--labels", "--workspace"):
            args += [opt, data.draw(st.sampled_from(
                ["/dev/null", d / "ws", d / "ws" / "checkpoint", d / "blobs.csv", d, "", "-",
                 d / "missing", "/proc/self/status", LONG, d / "ws" / LONG / "x",
                 *_fifo_paths(d)]))]  # fmt: skip
        elif opt == "--sample-shape":
            args += [opt, data.draw(st.sampled_from(["4", "0", "-1", "2", "99999999999", "x"]))]
        elif opt == "-o":
            args += [opt, data.draw(st.sampled_from(
                ["train_steps=1", "neuralnet.layer[0].store_conf.shape=5", "x=1", "=",
                 "neuralnet.layer[1].innerproduct_conf.num_output=7"]))]  # fmt: skip
        else:
            args.append(opt)
    res = _invoke(args)
    outcome = assert_clean(res)
    if outcome == "ok":
        assert "(nan)" not in res.output
    _outputs_intact(d)
    count("predict arguments")


# -- predict: input files --------------------------------------------------------------------
def _npy(a) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=False)
    return buf.getvalue()


def _npz(**arrays) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _kvfile(rows) -> bytes:
    from singa_core.schema import common_pb2

    out = b""
    for i, r in enumerate(rows):
        v = common_pb2.RecordProto(shape=[len(r)], data=list(r)).SerializeToString()
        t = struct.pack("<Q", 5 | 1 << 63) + b"%05d" % i + struct.pack("<Q", len(v)) + v
        out += t + struct.pack("<I", zlib.crc32(t))
    return out


def _png() -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("L", (2, 2), 7).save(buf, format="PNG")
    return buf.getvalue()


ODD = [np.nan, np.inf, -np.inf, 0.0, 255.0, 1e38, -1e38]


@st.composite
def input_files(draw):
    """(suffix, bytes): a valid input of each kind, an odd array, or mutations of either."""
    kind = draw(st.sampled_from(["npy", "npz", "csv", "kvfile", "png", "odd"]))
    if kind == "odd":
        shape = draw(st.sampled_from([(0, 4), (0,), (4,), (2, 4), (1, 2, 2), (3, 5), (4, 0)]))
        dtype = draw(st.sampled_from([np.float32, np.float64, np.float16]))
        with np.errstate(over="ignore"):  # 1e38 as float16 is inf: one of the odd values
            a = np.full(shape, draw(st.sampled_from(ODD)), dtype=dtype)
        if a.size and draw(st.booleans()):
            a.reshape(-1)[0] = 1.0
        suffix, data = ".npy", _npy(a)
    elif kind == "npy":
        suffix, data = ".npy", _npy(np.arange(8, dtype=np.float32).reshape(2, 4))
    elif kind == "npz":
        suffix, data = ".npz", _npz(a=np.ones((2, 4)), b=np.zeros(4, np.uint8))
    elif kind == "csv":
        suffix, data = ".csv", b"1,2,3,4\n0,1.5,2.5,3,4\n"
    elif kind == "kvfile":
        suffix, data = ".bin", _kvfile([[1, 2, 3, 4], [5, 6, 7, 8]])
    else:
        suffix, data = ".png", _png()
    if draw(st.booleans()):
        data = draw(byte_mutation(data))
    if draw(st.integers(0, 9)) == 0:
        suffix = draw(st.sampled_from(SUFFIXES))
    return suffix, data


@pytest.mark.slow
@fuzz_settings(80)
@given(files=st.lists(input_files(), min_size=1, max_size=3), output=st.booleans())
def test_predict_input_files(model, files, output):
    conf, d = model
    folder = d / "inputs"
    folder.mkdir(exist_ok=True)
    paths = []
    for i, (suffix, data) in enumerate(files):
        p = folder / f"in{i}{suffix}"
        p.write_bytes(data)
        paths.append(p)
    args = ["predict", conf, *paths]
    if output:
        args += ["--output", d / "preds.jsonl"]
    res = _invoke(args)
    if assert_clean(res) == "ok":
        assert "(nan)" not in res.output and "NaN" not in res.output
    count("predict input files")


# -- export ------------------------------------------------------------------------------------
@fuzz_settings(30)
@given(data=st.data())
def test_export_arguments(model, fifo_ws, data):
    pytest.importorskip("onnx")
    conf, d = model
    (d / "out").mkdir(exist_ok=True)
    args = ["export", conf, "--out", data.draw(_out_names(d))]
    if data.draw(st.booleans()):
        args += ["--format", data.draw(st.sampled_from(["onnx", "safetensors", "npz", "", "ONNX"]))]
    if data.draw(st.booleans()):
        args += [data.draw(st.sampled_from(["--checkpoint", "--workspace"])),
                 data.draw(st.sampled_from([d / "ws", d / "blobs.csv", "/dev/null",
                                            d / "missing", d, LONG, *_fifo_paths(d)]))]  # fmt: skip
    if data.draw(st.integers(0, 3)) == 0:
        args += ["-o", data.draw(st.text(max_size=30))]
    res = _invoke(args)
    assert_clean(res)
    _outputs_intact(d)
    count("export arguments")


# -- data images ---------------------------------------------------------------------------------
@st.composite
def image_folders(draw):
    """class -> [(name, bytes)]: small PNG/JPEG images, mutated ones, empty classes."""
    from PIL import Image

    classes = {}
    for c in range(draw(st.integers(1, 3))):
        files = []
        for i in range(draw(st.integers(0, 3))):
            w, h = draw(st.sampled_from([(4, 4), (4, 4), (5, 3), (1, 1)]))
            fmt = draw(st.sampled_from(["PNG", "JPEG"]))
            mode = draw(st.sampled_from(["RGB", "L", "RGBA", "P"]))
            if fmt == "JPEG" and mode in ("RGBA", "P"):
                mode = "RGB"
            buf = io.BytesIO()
            Image.new(mode, (w, h), 9).save(buf, format=fmt)
            raw = buf.getvalue()
            if draw(st.integers(0, 3)) == 0:
                raw = draw(byte_mutation(raw))
            files.append((f"{i}.{'png' if fmt == 'PNG' else 'jpg'}", raw))
        classes[f"c{c}"] = files
    return classes


@fuzz_settings(30)
@given(classes=image_folders(), data=st.data())
def test_data_images(workdir, tmp_path_factory, classes, data):
    d = workdir
    pytest.importorskip("PIL")
    root = tmp_path_factory.mktemp("imgs")
    src = root / "src"
    for name, files in classes.items():
        (src / name).mkdir(parents=True)
        for fname, raw in files:
            (src / name / fname).write_bytes(raw)
    if data.draw(st.integers(0, 4)) == 0:
        (src / "listfile.txt").write_text(
            data.draw(
                st.sampled_from(
                    [
                        "c0/0.png 0\n",
                        "c0/0.png -1\n",
                        "missing.png 3\n",
                        "",
                        "x\n",
                        "c0/0.png 99999\n",
                    ]
                )
            )
        )
    args = [
        "data",
        "images",
        src,
        "--out",
        data.draw(
            st.sampled_from(
                [
                    root / "out",
                    "/dev/null",
                    d / "planted" / "fifo.jsonl",
                    src / "c0" / "0.png",
                    "/proc",
                    root / LONG,
                ]
            )
        ),
    ]
    for _ in range(data.draw(st.integers(0, 3))):
        opt = data.draw(
            st.sampled_from(
                [
                    "--resize",
                    "--gray",
                    "--shuffle",
                    "--val-fraction",
                    "--encoded",
                    "--backend",
                    "--seed",
                    "--bogus",
                ]
            )
        )
        args.append(opt)
        if opt == "--resize":
            args += [
                data.draw(st.sampled_from(["4", "0", "-3", "x", "100000"])),
                data.draw(st.sampled_from(["4", "1", "2"])),
            ]
        elif opt == "--val-fraction":
            args.append(data.draw(st.sampled_from(["0.5", "1", "-0.1", "nan", "inf", "0"])))
        elif opt == "--backend":
            args.append(data.draw(st.sampled_from(["kvfile", "lmdb", "leveldb", ""])))
        elif opt == "--seed":
            args.append(data.draw(st.sampled_from(["0", "-1", "99999999999999999999", "s"])))
    res = _invoke(args)  # fmt: skip
    assert_clean(res)
    _outputs_intact(d)
    assert (src / "c0").is_dir() or "c0" not in classes
    count("data images")


# -- new-plugin: output folders ------------------------------------------------------------------
@fuzz_settings(30)
@given(data=st.data())
def test_new_plugin_outputs(workdir, tmp_path_factory, data):
    d = workdir
    if not (d / "afile").exists():
        (d / "afile").write_text("keep\n")
    if not (d / "link-to-file").is_symlink():
        (d / "link-to-file").symlink_to(d / "afile")
    out = data.draw(
        st.sampled_from(
            [
                "/dev/null",
                "/dev/full",
                "/proc",
                d / "planted" / "fifo.jsonl",
                d / "planted" / "link.csv",
                d / "afile",
                d / "afile" / "sub",
                d / "link-to-file",
                d / LONG,
                d / "ok" / LONG / "x",
                "",
            ]
        )
        | st.builds(lambda: tmp_path_factory.mktemp("np"))
    )
    name = data.draw(st.sampled_from(["foo", "scaled-tanh", "x" * 300, "Bad", "", "a" * 240]))
    kind = data.draw(st.sampled_from(["layer", "updater", "store", "dataset", "engine", "bogus"]))
    res = _invoke(["new-plugin", name, "--kind", kind, "--out", out])
    assert_clean(res)
    _outputs_intact(d)
    assert (d / "afile").read_text() == "keep\n"
    assert not (d / "afile").is_dir()
    count("new-plugin outputs")


# -- plot: inputs --------------------------------------------------------------------------------
@fuzz_settings(15)
@given(data=st.data())
def test_plot_inputs(model, data):
    conf, d = model
    metrics = (d / "ws" / "metrics.jsonl").read_bytes()
    (d / "plots").mkdir(exist_ok=True)
    mutated = d / "plots" / "m.jsonl"
    mutated.write_bytes(data.draw(byte_mutation(metrics)))
    args = ["plot"]
    for _ in range(data.draw(st.integers(1, 2))):
        args.append(
            data.draw(
                st.sampled_from(
                    [
                        d / "ws",
                        d / "ws" / "metrics.jsonl",
                        mutated,
                        "/dev/null",
                        "/dev/zero",
                        d / "planted" / "fifo.jsonl",
                        d / "planted" / "link.csv",
                        d / "planted",
                        d / "blobs.csv",
                        d / "blobs.csv" / "sub",
                        LONG,
                        d / "ws" / LONG,
                        d / "missing",
                        "",
                    ]
                )
            )
        )
    if data.draw(st.integers(0, 3)) > 0:  # a PNG costs a second of matplotlib: one in four
        args.append("--terminal")
    else:
        args += ["--out", data.draw(_out_names(d))]
    if data.draw(st.integers(0, 3)) == 0:
        args += ["--metric", data.draw(st.sampled_from(["loss", "accuracy", "bogus", ""]))]
    res = _invoke(args)
    assert_clean(res)
    _outputs_intact(d)
    count("plot inputs")


# -- command lines: random argument lists (issue 46, point 3) ----------------------------------
# commands that read and compute but start nothing in the background and convert no dataset;
# `train` always gets --dry-run appended
# (`singa` alone prints the help, as asked: test_cli_misc)
CLI_COMMANDS = ["train", "test", "predict", "export", "plot", "graph", "data", "list-plugins",
                "version", "trian"]  # fmt: skip


MISSPELT = ["--bogus", "-x", "--out=", "--top-k=abc", "--seed=-3", "--steps", "--help-me"]


def _cli_options(name: str) -> list:
    import typer.main

    group = typer.main.get_command(app)
    cmd = group.commands.get(name) if name else None
    return [] if cmd is None else [p for p in cmd.params if p.param_type_name == "option"]


@pytest.mark.slow
@fuzz_settings(60)
@given(data=st.data())
def test_random_command_lines_end_in_success_or_the_one_error_form(model, fifo_ws, data):
    conf, d = model
    cli = d / "cli"
    cli.mkdir(exist_ok=True)
    job = cli / "job.conf"  # a copy: an --out drawn onto it is harmless
    job.write_text(conf.read_text())
    sample = cli / "x.npy"
    np.save(sample, np.ones((2, 4), np.float32))
    values = [
        "0", "-1", "1", "3", "1.5", "abc", "", "é", "--", "-", LONG, job, sample, d / "ws",
        d / "missing", "/dev/null", d / "planted" / "fifo.conf", *_fifo_paths(d), cli / "o.onnx",
        cli / "o.safetensors", cli / "p.jsonl", "train_steps=1", "x=1",
    ]  # fmt: skip
    name = data.draw(st.sampled_from(CLI_COMMANDS))
    options = _cli_options(name)
    args = [name]
    if name == "data":
        args.append(data.draw(st.sampled_from(["bogus", "images", "", "é"])))
    for _ in range(data.draw(st.integers(0, 6))):
        kind = data.draw(st.sampled_from(["option", "option", "value", "misspelt"]))
        if kind == "option" and options:
            opt = data.draw(st.sampled_from(options))
            flag = data.draw(st.sampled_from(opt.opts + opt.secondary_opts))
            args.append(flag)
            if not opt.is_flag and data.draw(st.integers(0, 5)):
                args.append(data.draw(st.sampled_from(values)))
        elif kind == "misspelt":
            args.append(data.draw(st.sampled_from(MISSPELT)))
        else:
            args.append(data.draw(st.sampled_from(values)))
    if name == "train":
        args.append("--dry-run")
    res = _invoke(args)
    assert_clean(res)
    _outputs_intact(d)
    count("command lines")
