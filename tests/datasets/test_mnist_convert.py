"""`singa data mnist` converter on the real MNIST files (create_data.cc's output)."""

import gzip
import os
import shutil
import struct
from collections import Counter
from pathlib import Path

import pytest
from singa_builtins.datasets.mnist import MnistConverter
from singa_builtins.stores.kvfile import KVFileStore

from singa_core.errors import SingaError
from singa_core.schema import common_pb2
from singa_core.store import KREAD

SRC = Path(os.environ.get("SINGA_DATA", "/work/shared/data")) / "mnist"
TRAIN_COUNTS = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
TEST_COUNTS = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]

needs_data = pytest.mark.skipif(
    not all((SRC / n).is_file() for n in MnistConverter.files),
    reason=f"MNIST files not found in {SRC}",
)


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    out = tmp_path_factory.mktemp("mnist_out")
    messages = []
    written = MnistConverter().convert(SRC, out, messages.append)
    return out, written, messages


def idx_images(name):
    with gzip.open(SRC / name) as fh:
        return fh.read()[16:]


def records(path):
    s = KVFileStore()
    s.open(str(path), KREAD)
    while (r := s.read()) is not None:
        yield r
    s.close()


def test_converter_metadata():
    conv = MnistConverter()
    assert conv.name == "mnist" and MnistConverter.type_names == ("mnist",)
    assert conv.env_subdir == "mnist"
    assert set(conv.files) == {
        "train-images-idx3-ubyte.gz",
        "train-labels-idx1-ubyte.gz",
        "t10k-images-idx3-ubyte.gz",
        "t10k-labels-idx1-ubyte.gz",
    }
    for name, (sha, size, url) in conv.files.items():
        assert len(sha) == 64 and size > 0
        assert url == f"https://ossci-datasets.s3.amazonaws.com/mnist/{name}"


@needs_data
def test_checksums_in_files_match_the_real_data():
    from singa_core.commands.datasets import sha256_of

    for name, (sha, size, _) in MnistConverter.files.items():
        assert (SRC / name).stat().st_size == size
        assert sha256_of(SRC / name) == sha


@needs_data
@pytest.mark.parametrize(
    "store, images, n, counts, first_label",
    [
        ("train_data.bin", "train-images-idx3-ubyte.gz", 60000, TRAIN_COUNTS, 5),
        ("test_data.bin", "t10k-images-idx3-ubyte.gz", 10000, TEST_COUNTS, 7),
    ],
)
def test_converted_store(converted, store, images, n, counts, first_label):
    out, written, messages = converted
    assert written == [out / "train_data.bin", out / "test_data.bin"]
    assert any("60000" in m for m in messages) and any("10000" in m for m in messages)
    pixels = idx_images(images)
    labels = Counter()
    for i, (key, val) in enumerate(records(out / store)):
        assert key == b"%08d" % i
        if i < 3 or i == n - 1:
            rec = common_pb2.RecordProto()
            rec.ParseFromString(val)
            assert list(rec.shape) == [28, 28]
            assert rec.pixel == pixels[i * 784 : (i + 1) * 784]
            assert len(rec.data) == 0
            # byte-identical to protobuf's own serialization of the same record
            assert (
                val
                == common_pb2.RecordProto(
                    shape=[28, 28], label=rec.label, pixel=rec.pixel
                ).SerializeToString()
            )
            if i == 0:
                assert rec.label == first_label
        # the label is the varint right after the two shape fields: 08 1c 08 1c 10 <label>
        assert val[:5] == b"\x08\x1c\x08\x1c\x10"
        labels[val[5]] += 1
    assert i == n - 1
    assert [labels[d] for d in range(10)] == counts


@needs_data
def test_truncated_gz_is_a_clear_error(tmp_path):
    src = tmp_path / "raw"
    src.mkdir()
    for name in MnistConverter.files:
        shutil.copy(SRC / name, src / name)
    bad = src / "t10k-labels-idx1-ubyte.gz"
    bad.write_bytes(bad.read_bytes()[:2000])
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(SingaError) as err:
        MnistConverter().convert(src, out, lambda m: None)
    assert "t10k-labels-idx1-ubyte.gz" in err.value.message
    assert str(err.value.where) == str(bad) and err.value.help
    # the train store was finished; no partial test store or temp file is left
    assert sorted(os.listdir(out)) == ["train_data.bin"]


def write_gz(path, data):
    with gzip.open(path, "wb") as fh:
        fh.write(data)


def test_bad_magic_count_and_size(tmp_path):
    img = struct.pack(">4I", 2051, 2, 2, 2) + bytes(range(8))
    lab = struct.pack(">2I", 2049, 2) + b"\x03\x09"
    write_gz(tmp_path / "t10k-images-idx3-ubyte.gz", img)
    write_gz(tmp_path / "t10k-labels-idx1-ubyte.gz", lab)
    # a tiny well-formed split converts, with shape taken from the header
    from singa_builtins.datasets.mnist import convert_split

    out = tmp_path / "tiny.bin"
    assert (
        convert_split(
            tmp_path / "t10k-images-idx3-ubyte.gz",
            tmp_path / "t10k-labels-idx1-ubyte.gz",
            out,
            lambda m: None,
        )
        == 2
    )
    got = list(records(out))
    assert got[1] == (
        b"00000001",
        common_pb2.RecordProto(shape=[2, 2], label=9, pixel=bytes(range(4, 8))).SerializeToString(),
    )

    cases = [
        (struct.pack(">4I", 2049, 2, 2, 2) + bytes(8), lab, "magic number 2049"),
        (struct.pack(">4I", 2051, 2, 2, 2) + bytes(7), lab, "announces 2 x 2 x 2 = 8"),
        (img, struct.pack(">2I", 2049, 3) + b"\x01\x02\x03", "holds 3 labels"),
        (b"\x00\x00", lab, "too short"),
    ]
    for images, labels, message in cases:
        write_gz(tmp_path / "i.gz", images)
        write_gz(tmp_path / "l.gz", labels)
        with pytest.raises(SingaError) as err:
            convert_split(tmp_path / "i.gz", tmp_path / "l.gz", tmp_path / "x.bin", lambda m: None)
        assert message in err.value.message and err.value.help
        assert not (tmp_path / "x.bin").exists()
