"""``singa data cifar10``: SINGA 0.3's examples/cifar10/create_data.cc.

Reads the six files of CIFAR-10's binary version (``data_batch_1.bin`` … ``data_batch_5.bin``,
``test_batch.bin``; each exactly 10000 records of 1 label byte + 3072 pixel bytes, the red,
green and blue 32×32 planes) and writes three kvfile stores:

* ``train_data.bin``: the 50000 training images in file order, one ``RecordProto`` each
  (``shape = [3, 32, 32]``, ``label``, ``pixel`` = the 3072 bytes) under the key ``"%05d"``
  of its running index (``00000`` … ``49999``);
* ``image_mean.bin``: one tuple, key ``"mean"``, a RecordProto with ``shape = [3, 32, 32]``
  and ``data`` = the 3072 per-pixel means over the training set (float32; the sums are
  exact, so the values equal 0.3's float32 arithmetic) — kRecordInput's ``mean_file`` and
  kRGBImage's ``meanfile`` read it;
* ``test_data.bin``: the 10000 test images, keys ``00000`` … ``09999``.

The files are written in that order, each atomically (a temp file renamed into place). The
official distribution is one archive, ``cifar-10-binary.tar.gz``, so there is no download
address for the individual files: extract it and pass its ``cifar-10-batches-bin`` folder
with ``--from`` (or put the files into ``$SINGA_DATA/cifar10``).

Differences from 0.3: every file's size is checked before anything is written and a label
outside 0–9 is an error naming the file and record (0.3 read short files as garbage).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from singa_core.dataset import DatasetConverter
from singa_core.errors import SingaError
from singa_core.plugin_host.host import get_host
from singa_core.schema import common_pb2
from singa_core.store import KCREATE

_HOME = "https://www.cs.toronto.edu/~kriz/cifar.html"
_SIDE, _CHANNELS, _CLASSES = 32, 3, 10
_PIXELS = _CHANNELS * _SIDE * _SIDE  # 3072
_RECORD = 1 + _PIXELS  # 3073
_PER_FILE = 10000
_FILE_BYTES = _PER_FILE * _RECORD  # 30730000
_TRAIN_FILES = tuple(f"data_batch_{i}.bin" for i in range(1, 6))
_TEST_FILE = "test_batch.bin"
_BAD_FILE_HELP = (
    "the file is damaged, incomplete or not from CIFAR-10's binary version; extract it again "
    f"from cifar-10-binary.tar.gz ({_HOME})"
)


def _check_size(path: Path) -> None:
    try:
        size = os.stat(path).st_size
    except OSError as exc:
        raise SingaError(
            f"cannot read {path.name}: {exc.strerror or exc}",
            where=str(path),
            help=f"--from must name the folder holding {', '.join(CifarConverter.files)}",
        ) from None
    if size != _FILE_BYTES:
        raise SingaError(
            f"{path.name} has {size} bytes, expected {_FILE_BYTES} "
            f"({_PER_FILE} records of 1 label byte and {_PIXELS} pixel bytes)",
            where=str(path),
            help=_BAD_FILE_HELP,
        )


def _read_batch(path: Path) -> bytes:
    """The file's bytes, checked: exact size and labels 0–9."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise SingaError(
            f"cannot read {path.name}: {exc.strerror or exc}",
            where=str(path),
            help="check the file's permissions, or give --from the folder holding the CIFAR-10 "
            "binary batches",
        ) from None
    if len(raw) != _FILE_BYTES:
        raise SingaError(
            f"{path.name} has {len(raw)} bytes, expected {_FILE_BYTES}",
            where=str(path),
            help=_BAD_FILE_HELP,
        )
    labels = np.frombuffer(raw, dtype=np.uint8)[::_RECORD]
    bad = np.flatnonzero(labels >= _CLASSES)
    if bad.size:
        i = int(bad[0])
        raise SingaError(
            f"{path.name}: record {i} (byte offset {i * _RECORD}) has label {labels[i]}, "
            f"but CIFAR-10 labels are 0-{_CLASSES - 1}",
            where=str(path),
            help=_BAD_FILE_HELP,
        )
    return raw


def _record_heads() -> list[bytes]:
    """Per label, the serialized RecordProto(shape=[3, 32, 32], label, pixel=<3072 bytes>)
    without the pixel bytes: a record is its head followed by its pixels."""
    heads = []
    for label in range(_CLASSES):
        full = common_pb2.RecordProto(
            shape=[_CHANNELS, _SIDE, _SIDE], label=label, pixel=bytes(_PIXELS)
        ).SerializeToString()
        heads.append(full[: len(full) - _PIXELS])
    return heads


def _write_images(sources: list[Path], out: Path, log, pixel_sum: np.ndarray | None) -> int:
    """One kvfile of RecordProtos from CIFAR batch files; adds pixel sums to ``pixel_sum``."""
    heads = _record_heads()
    store = get_host().get("store", "kvfile")()  # create_data.cc writes kvfiles
    store.open(str(out), KCREATE)
    count = 0
    try:
        for path in sources:
            log(f"reading {path.name}")
            raw = _read_batch(path)
            if pixel_sum is not None:
                images = np.frombuffer(raw, dtype=np.uint8).reshape(_PER_FILE, _RECORD)[:, 1:]
                pixel_sum += images.sum(axis=0, dtype=np.int64)
            view = memoryview(raw)
            write = store.write
            for i in range(_PER_FILE):
                off = i * _RECORD
                write(b"%05d" % count, heads[view[off]] + view[off + 1 : off + _RECORD])
                count += 1
    except BaseException:
        store.abort()
        raise
    store.close()
    log(f"wrote {count} records to {out}")
    return count


def _write_mean(mean: np.ndarray, out: Path, log) -> None:
    record = common_pb2.RecordProto(shape=[_CHANNELS, _SIDE, _SIDE], data=mean.tolist())
    store = get_host().get("store", "kvfile")()
    store.open(str(out), KCREATE)
    try:
        store.write(b"mean", record.SerializeToString())
    except BaseException:
        store.abort()
        raise
    store.close()
    log(f"wrote the per-pixel mean to {out}")


class CifarConverter(DatasetConverter):
    """CIFAR-10's binary batches -> ``train_data.bin``, ``image_mean.bin``, ``test_data.bin``."""

    type_names = ("cifar10",)
    name = "cifar10"
    description = (
        "CIFAR-10 images -> train_data.bin, test_data.bin (kvfile RecordProtos) and "
        "image_mean.bin; extract cifar-10-binary.tar.gz from "
        f"{_HOME} and pass its cifar-10-batches-bin folder with --from"
    )
    env_subdir = "cifar10"
    # (sha256, size, url): the files come only inside cifar-10-binary.tar.gz, so no url
    files = {
        "data_batch_1.bin": (
            "cee916563c9f80d84e3cc88e17fdc0941787f1244f00a67874d45b261883ada5",
            _FILE_BYTES,
            None,
        ),
        "data_batch_2.bin": (
            "a591ca11fa1708a91ee40f54b3da4784ccd871ecf2137de63f51ada8b3fa57ed",
            _FILE_BYTES,
            None,
        ),
        "data_batch_3.bin": (
            "bbe8596564c0f86427f876058170b84dac6670ddf06d79402899d93ceea26f67",
            _FILE_BYTES,
            None,
        ),
        "data_batch_4.bin": (
            "014e562d6e23c72197cc727519169a60359f5eccd8945ad5a09d710285ff4e48",
            _FILE_BYTES,
            None,
        ),
        "data_batch_5.bin": (
            "755304fc0b379caeae8c14f0dac912fbc7d6cd469eb67a1029a08a39453a9add",
            _FILE_BYTES,
            None,
        ),
        "test_batch.bin": (
            "8e2eb146ae340b09e24670f29cabc6326dba54da8789dab6768acf480273f65b",
            _FILE_BYTES,
            None,
        ),
    }

    def convert(self, source_dir: Path, out_dir: Path, log) -> list[Path]:
        source_dir, out_dir = Path(source_dir), Path(out_dir)
        train = [source_dir / name for name in _TRAIN_FILES]
        test = source_dir / _TEST_FILE
        for path in [*train, test]:  # all sizes first: nothing is written for a bad file
            _check_size(path)
        pixel_sum = np.zeros(_PIXELS, dtype=np.int64)
        n = _write_images(train, out_dir / "train_data.bin", log, pixel_sum)
        mean = (pixel_sum / n).astype(np.float32)  # exact sums, one rounding to float32
        _write_mean(mean, out_dir / "image_mean.bin", log)
        _write_images([test], out_dir / "test_data.bin", log, None)
        return [out_dir / "train_data.bin", out_dir / "image_mean.bin", out_dir / "test_data.bin"]
