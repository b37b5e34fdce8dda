"""What ``singa predict`` reads and writes.

Inputs, each turned into raw samples of the model's ``sample_shape`` (the values the data
layer reads from a record: pixels 0-255, C×H×W):

* image files (``.png``, ``.jpg``, ``.jpeg``, ``.bmp``, ``.gif``, ``.webp``; Pillow, the
  ``singa-classic[images]`` extra): gray for one channel (or a flat sample whose size is a
  square), RGB for three; a size or channel count that differs from the model's is an error
  unless ``resize`` is given;
* ``.npy`` (one sample, or N of them) and ``.npz`` (every array in it);
* SINGA stores: ``.csv``/``.txt`` lines as kCSVInput reads them (a leading label is skipped
  when the line has one value more than a sample), anything else a kvfile of RecordProto
  records (``data`` floats, else ``pixel`` bytes).

Every sample has a name: the path as given, or ``PATH[i]`` for the i-th row or record.
"""

from __future__ import annotations

import csv
import io
import json
import math
import tokenize
import zipfile
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from singa_core.contracts.errors import SingaError
from singa_core.inference.input_layout import conform, layout_name
from singa_core.inference.sample_checks import check_samples, refuse_special_file

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff"}


def _image_geometry(shape: tuple[int, ...]) -> tuple[int, int, int]:
    """(channels, height, width) of a sample shape, for images."""
    if len(shape) == 3:
        return shape[0], shape[1], shape[2]
    if len(shape) == 2:
        return 1, shape[0], shape[1]
    side = math.isqrt(int(math.prod(shape)))
    if side * side == int(math.prod(shape)):
        return 1, side, side
    raise SingaError(
        f"the model's samples ({shape}) are not images",
        where="INPUT",
        help="give .npy/.npz arrays or a store instead of image files",
    )


def read_image(
    path: Path, shape: tuple[int, ...], resize: bool = False, notes: list[str] | None = None
) -> np.ndarray:
    """The raw C×H×W pixels of an image file for a model of sample ``shape``; with
    ``resize`` a size or channel count that differs is converted, and a colour image made
    grey (or a grey one RGB) adds a line to ``notes``."""
    try:
        from PIL import Image, UnidentifiedImageError
    except ImportError:
        raise SingaError(
            "reading image files needs Pillow",
            where=str(path),
            help="pip install 'singa-classic[images]', or give .npy arrays",
        ) from None
    channels, height, width = _image_geometry(shape)
    if channels not in (1, 3):
        raise SingaError(
            f"the model takes {channels}-channel samples; images have 1 or 3",
            where=str(path),
            help="give .npy arrays of the samples",
        )
    try:
        with Image.open(path) as img:
            img.load()
            mode = img.mode
            bands = len(img.getbands())
            if (img.height, img.width) != (height, width) and not resize:
                raise SingaError(
                    f"image is {img.width}x{img.height}, the model takes {width}x{height}",
                    where=str(path),
                    help=f"resize it, or add --resize to scale it to {width}x{height}",
                )
            if bands != channels and mode not in ("P", "LA", "RGBA", "I", "I;16") and not resize:
                raise SingaError(
                    f"image has {bands} channel(s) ({mode}), the model takes {channels}",
                    where=str(path),
                    help="convert it, or add --resize to convert it too",
                )
            colour = bands >= 3 and mode not in ("P",)
            if notes is not None and (colour if channels == 1 else bands == 1):
                made = "grey" if channels == 1 else "RGB (the grey value in every channel)"
                notes.append(
                    f"{path}: a {mode} image made {made} for the model's {channels}-channel "
                    "input (--resize converts channels too)"
                )
            img = img.convert("L" if channels == 1 else "RGB")
            if (img.height, img.width) != (height, width):
                img = img.resize((width, height), Image.Resampling.BILINEAR)
            pixels = np.asarray(img, dtype=np.float32)
    except (OSError, UnidentifiedImageError, ValueError) as exc:
        raise SingaError(
            f"cannot read the image: {exc}",
            where=str(path),
            help="give a PNG or JPEG file",
        ) from None
    if channels == 3:
        pixels = pixels.transpose(2, 0, 1)  # records hold C×H×W
    return pixels.reshape(shape)


def _as_samples(
    array: np.ndarray, shape: tuple[int, ...], where: str, layout: str | None = None
) -> np.ndarray:
    """One sample (an array of exactly ``shape``; ``(H, W, C)`` with layout NHWC) or N of
    them; shapes that only match by size are refused (input_layout.conform)."""
    if array.dtype.kind not in "fiub":
        raise SingaError(
            f"array of {array.dtype}, not numbers",
            where=where,
            help="save the raw sample values (e.g. uint8 pixels)",
        )
    nhwc = layout_name(layout, "--layout") == "NHWC" and len(shape) == 3
    one = (shape[1], shape[2], shape[0]) if nhwc else shape
    if tuple(array.shape) == tuple(one):
        array = array[None]
    return conform(array, shape, layout=layout, where=where, option="--layout NHWC")


def _read_records(path: Path, shape: tuple[int, ...]) -> np.ndarray:
    from google.protobuf.message import DecodeError

    from singa_core.plugin_host.host import get_host
    from singa_core.schema import common_pb2

    size = int(math.prod(shape))
    store = get_host().get("store", "kvfile")()
    store.open(str(path), 1)  # KREAD
    rows = []
    try:
        while (rec := store.read()) is not None:
            key, value = rec
            msg = common_pb2.RecordProto()
            try:
                msg.ParseFromString(value)
            except DecodeError:
                raise SingaError(
                    f"record '{key.decode(errors='replace')}' is not a RecordProto",
                    where=str(path),
                    help="give a kvfile store of RecordProto records (as singa data writes)",
                ) from None
            if len(msg.data):
                row = np.asarray(msg.data, dtype=np.float32)
            else:
                row = np.frombuffer(msg.pixel, dtype=np.uint8).astype(np.float32)
            if row.size != size:
                raise SingaError(
                    f"record '{key.decode(errors='replace')}' has {row.size} values, the model "
                    f"takes {size}",
                    where=str(path),
                    help="give records of the data the model was trained on",
                )
            rows.append(row.reshape(shape))
    finally:
        store.close()
    return np.stack(rows) if rows else np.empty((0, *shape), np.float32)


def _read_csv(path: Path, shape: tuple[int, ...]) -> np.ndarray:
    size = int(math.prod(shape))
    rows = []
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise SingaError(
                    f"not UTF-8 text: {exc.reason} at byte {exc.start} of the line",
                    where=f"{path}:{lineno}",
                    help="give a text file of comma-separated numbers",
                ) from None
            tokens = [t for t in line.strip().split(",") if t != ""]
            if not tokens:
                continue
            if len(tokens) == size + 1:
                tokens = tokens[1:]  # the label, as kCSVInput reads it
            if len(tokens) != size:
                raise SingaError(
                    f"line has {len(tokens)} values, the model takes {size}",
                    where=f"{path}:{lineno}",
                    help="one sample per line: its values, optionally after its label",
                )
            try:
                rows.append(np.asarray([float(t) for t in tokens], np.float32).reshape(shape))
            except ValueError as exc:
                raise SingaError(
                    f"not a number: {exc}",
                    where=f"{path}:{lineno}",
                    help="values are separated by commas",
                ) from None
    return np.stack(rows) if rows else np.empty((0, *shape), np.float32)


def _numpy_file(path: Path, take):
    """``take`` applied to what ``numpy.load`` reads from ``path`` (no pickles); a file numpy
    cannot read is a SingaError naming it."""
    try:
        loaded = np.load(path, allow_pickle=False)
        archive = path.suffix.lower() == ".npz"
        if isinstance(loaded, np.ndarray):
            if archive:  # what the name says is not what it holds: take neither
                raise SingaError(
                    "the file is one .npy array, not the .npz archive its name says",
                    where=str(path),
                    help="name it FILE.npy (or write it with numpy.savez)",
                )
            return take(loaded)
        with loaded:
            if not archive:
                raise SingaError(
                    "the file is an .npz archive, not the .npy array its name says",
                    where=str(path),
                    help="name it FILE.npz (or write it with numpy.save)",
                )
            return take(loaded)
    except (
        ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error, KeyError,
        NotImplementedError, RuntimeError,  # damaged or unusual zip members of an .npz
        SyntaxError, tokenize.TokenError, MemoryError,  # a damaged .npy header
    ) as exc:  # fmt: skip
        writer = "numpy.save" if path.suffix.lower() == ".npy" else "numpy.savez"
        raise SingaError(
            f"cannot read the array file: {exc}",
            where=str(path),
            help=f"give a {path.suffix.lower()} file written by {writer}",
        ) from None


def read_inputs(
    paths: Sequence[Path],
    shape: tuple[int, ...],
    *,
    resize: bool = False,
    layout: str | None = None,
    notes: list[str] | None = None,
):
    """(names, samples): every input's samples, stacked ``(N, *shape)`` float32. ``layout``
    says how .npy/.npz images are laid out (NCHW, the default, or NHWC)."""
    names: list[str] = []
    parts: list[np.ndarray] = []
    for path in map(Path, paths):
        if not path.exists():
            raise SingaError(
                "input not found",
                where=str(path),
                help="give image files, .npy/.npz arrays or a store",
            )
        if path.is_dir():
            raise SingaError(
                "input is a folder", where=str(path), help=f"give its files, e.g. {path}/*.png"
            )
        refuse_special_file(path)  # a FIFO, socket or device: refused by name
        shown = str(path)  # rows are named by the path as given: a/x.png and b/x.png differ
        suffix = path.suffix.lower()
        if suffix in IMAGE_SUFFIXES:
            parts.append(read_image(path, shape, resize, notes)[None])
            names.append(shown)
            continue
        if suffix == ".npy":
            samples = _as_samples(_numpy_file(path, lambda a: a), shape, str(path), layout)
        elif suffix == ".npz":
            groups = _numpy_file(
                path,
                lambda f, p=path: [
                    (k, _as_samples(f[k], shape, f"{p}[{k}]", layout)) for k in f.files
                ],
            )
            for key, samples in groups:
                parts.append(samples)
                names += [f"{shown}[{key}][{i}]" for i in range(len(samples))]
                check_samples(names[len(names) - len(samples) :], samples, f"{path}[{key}]")
            continue
        elif suffix in (".csv", ".txt"):
            samples = _read_csv(path, shape)
        else:
            samples = _read_records(path, shape)
        parts.append(samples)
        names += (
            [shown]
            if len(samples) == 1 and suffix == ".npy"
            else [f"{shown}[{i}]" for i in range(len(samples))]
        )
        check_samples(names[len(names) - len(samples) :], samples, str(path))
    if not parts:
        raise SingaError("no inputs", where="INPUT", help="give at least one input file")
    return names, np.concatenate([p.astype(np.float32, copy=False) for p in parts])


def read_labels(path: Path | None) -> list[str] | None:
    """Class names, one a line (line i = class i), e.g. the labels.txt of singa data images."""
    if path is None:
        return None
    from singa_core.running.fileio import read_regular_text

    try:  # a FIFO (or device) is refused at once, never waited on
        return [
            line.rstrip("\n") for line in read_regular_text(path, "class names file").splitlines()
        ]
    except SingaError as err:
        err.help = "give a text file with one class name a line"
        raise
    except UnicodeDecodeError as exc:
        raise SingaError(
            f"cannot read class names: not UTF-8 text ({exc.reason} at byte {exc.start})",
            where=str(path),
            help="give a text file with one class name a line",
        ) from None
    except OSError as exc:
        raise SingaError(
            f"cannot read class names: {exc.strerror}",
            where=str(path),
            help="give a text file with one class name a line",
        ) from None


def class_name(index: int, labels: list[str] | None) -> str | int:
    if labels is not None and 0 <= index < len(labels):
        return labels[index]
    return int(index)


def predictions_table(names, scores: np.ndarray, top_k: int, labels=None) -> str:
    """The terminal table: input, then top-k ``class (probability)``."""
    order = np.argsort(-scores, axis=1, kind="stable")[:, :top_k]
    width = max(len("input"), *(len(n) for n in names))
    head = f"{'input':<{width}}  " + "  ".join(f"{'top-' + str(k + 1):<22}" for k in range(top_k))
    lines = [head.rstrip()]
    for name, row, idx in zip(names, scores, order, strict=True):
        cells = [f"{str(class_name(int(i), labels)) + f' ({row[i]:.4f})':<22}" for i in idx]
        lines.append((f"{name:<{width}}  " + "  ".join(cells)).rstrip())
    return "\n".join(lines)


def predictions_bytes(fmt: str, names, scores: np.ndarray, top_k: int, labels=None) -> bytes:
    """``--output`` contents: ``jsonl`` (one object per input with its top-k), ``csv``
    (input, class, probability of the top-1) or ``npz`` (names and the whole matrix)."""
    order = np.argsort(-scores, axis=1, kind="stable")[:, :top_k]
    if fmt == "jsonl":
        out = io.StringIO()
        for name, row, idx in zip(names, scores, order, strict=True):
            top = [[class_name(int(i), labels), round(float(row[i]), 7)] for i in idx]
            out.write(json.dumps({"input": name, "top": top}) + "\n")
        return out.getvalue().encode()
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["input", "class", "probability"])
        for name, row, idx in zip(names, scores, order, strict=True):
            writer.writerow([name, class_name(int(idx[0]), labels), f"{float(row[idx[0]]):.7g}"])
        return out.getvalue().encode()
    buf = io.BytesIO()
    np.savez(buf, names=np.asarray(names), output=scores)
    return buf.getvalue()
