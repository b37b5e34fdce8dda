"""``singa data mnist``: SINGA 0.3's examples/mnist/create_data.cc.

Reads the four gzip-compressed IDX files of MNIST (big-endian headers; magic 2051 for
images, 2049 for labels) and writes two kvfile stores, ``train_data.bin`` (60000 records)
and ``test_data.bin`` (10000), with one ``RecordProto`` per image: ``shape = [rows, cols]``
(``[28, 28]``), ``label``, ``pixel`` = the image's raw bytes, under the key ``"%08d"`` of its
index.
"""

from __future__ import annotations

import gzip
import struct
import zlib
from pathlib import Path

from singa_core.dataset import DatasetConverter
from singa_core.errors import SingaError
from singa_core.plugin_host.host import get_host
from singa_core.schema import common_pb2
from singa_core.store import KCREATE

_URL = "https://ossci-datasets.s3.amazonaws.com/mnist/"
_IMAGES_MAGIC, _LABELS_MAGIC = 2051, 2049
_SPLITS = (
    ("train_data.bin", "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    ("test_data.bin", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
)
_BAD_FILE_HELP = (
    "the file is damaged or incomplete; delete it and run `singa data mnist` again to "
    "download it, or replace it with a good copy"
)


def _read_idx(path: Path, magic: int, ndim: int) -> tuple[tuple[int, ...], memoryview]:
    """Decompress an IDX file and check it: ``(sizes, data bytes after the header)``."""
    try:
        with gzip.open(path, "rb") as fh:
            raw = fh.read()
    except (OSError, EOFError, zlib.error) as exc:
        raise SingaError(
            f"cannot decompress {path.name}: {exc}", where=str(path), help=_BAD_FILE_HELP
        ) from None
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise SingaError(
            f"{path.name} is too short for an IDX header ({len(raw)} bytes after decompression)",
            where=str(path),
            help=_BAD_FILE_HELP,
        )
    found, *sizes = struct.unpack_from(f">{1 + ndim}I", raw)
    if found != magic:
        kind = "images" if magic == _IMAGES_MAGIC else "labels"
        raise SingaError(
            f"{path.name} has magic number {found}, expected {magic} (IDX {kind} file)",
            where=str(path),
            help="check that the file is the MNIST file of that name (images and labels "
            "files may have been swapped)",
        )
    n_bytes = 1
    for s in sizes:
        n_bytes *= s
    if len(raw) != header + n_bytes:
        raise SingaError(
            f"{path.name} holds {len(raw) - header} data bytes after its header, but its "
            f"header announces {' x '.join(map(str, sizes))} = {n_bytes}",
            where=str(path),
            help=_BAD_FILE_HELP,
        )
    return tuple(sizes), memoryview(raw)[header:]


def _record_head(rows: int, cols: int, label: int, n_pixels: int) -> bytes:
    """Serialized RecordProto(shape=[rows, cols], label=label, pixel=<n_pixels bytes>),
    without the pixel bytes themselves: a record is this head followed by its pixels."""
    full = common_pb2.RecordProto(
        shape=[rows, cols], label=label, pixel=bytes(n_pixels)
    ).SerializeToString()
    return full[: len(full) - n_pixels]


def convert_split(images: Path, labels: Path, out: Path, log) -> int:
    """Write one kvfile of RecordProtos from an images and a labels IDX file; returns count."""
    log(f"reading {images.name} and {labels.name}")
    (n, rows, cols), pixels = _read_idx(images, _IMAGES_MAGIC, 3)
    (n_labels,), label_bytes = _read_idx(labels, _LABELS_MAGIC, 1)
    if n != n_labels:
        raise SingaError(
            f"{images.name} holds {n} images but {labels.name} holds {n_labels} labels",
            where=str(labels),
            help="use an images file and the labels file of the same split",
        )
    size = rows * cols
    heads: dict[int, bytes] = {}
    store = get_host().get("store", "kvfile")()  # SINGA's create_data writes kvfiles
    store.open(str(out), KCREATE)
    try:
        for i in range(n):
            label = label_bytes[i]
            head = heads.get(label)
            if head is None:
                head = heads[label] = _record_head(rows, cols, label, size)
            store.write(b"%08d" % i, head + pixels[i * size : (i + 1) * size])
    except BaseException:
        store.abort()
        raise
    store.close()
    log(f"wrote {n} records to {out}")
    return n


class MnistConverter(DatasetConverter):
    """MNIST's IDX files -> ``train_data.bin`` and ``test_data.bin`` kvfile stores."""

    type_names = ("mnist",)
    name = "mnist"
    description = "MNIST handwritten digits -> train_data.bin, test_data.bin (kvfile RecordProtos)"
    env_subdir = "mnist"
    files = {
        "train-images-idx3-ubyte.gz": (
            "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
            9912422,
            _URL + "train-images-idx3-ubyte.gz",
        ),
        "train-labels-idx1-ubyte.gz": (
            "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
            28881,
            _URL + "train-labels-idx1-ubyte.gz",
        ),
        "t10k-images-idx3-ubyte.gz": (
            "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
            1648877,
            _URL + "t10k-images-idx3-ubyte.gz",
        ),
        "t10k-labels-idx1-ubyte.gz": (
            "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
            4542,
            _URL + "t10k-labels-idx1-ubyte.gz",
        ),
    }

    def convert(self, source_dir: Path, out_dir: Path, log) -> list[Path]:
        source_dir, out_dir = Path(source_dir), Path(out_dir)
        written = []
        for out_name, images, labels in _SPLITS:
            out = out_dir / out_name
            convert_split(source_dir / images, source_dir / labels, out, log)
            written.append(out)
        return written
