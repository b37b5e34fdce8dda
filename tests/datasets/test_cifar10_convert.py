"""`singa data cifar10` on the real CIFAR-10 binary files (create_data.cc's output): record
counts, keys, records byte-identical to protobuf's, the per-pixel mean, errors, the CLI."""

from __future__ import annotations

import os
import shutil
from collections import Counter
from itertools import islice

import numpy as np
import pytest
from conftest import run_singa
from singa_builtins.datasets.cifar10 import CifarConverter
from singa_builtins.layers._records import load_mean_file
from singa_builtins.stores.kvfile import KVFileStore

from singa_core.errors import SingaError
from singa_core.schema import common_pb2
from singa_core.store import KREAD

NAMES = [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]
HEAD = b"\x08\x03\x08\x20\x08\x20\x10"  # shape 3, 32, 32 then the label tag


@pytest.fixture(scope="module")
def src(data_dir):
    return data_dir / "cifar10"


@pytest.fixture(scope="module")
def converted(src, tmp_path_factory):
    out = tmp_path_factory.mktemp("cifar10_out")
    messages = []
    written = CifarConverter().convert(src, out, messages.append)
    return out, written, messages


def raw_records(src, names):
    data = b"".join((src / n).read_bytes() for n in names)
    return np.frombuffer(data, dtype=np.uint8).reshape(-1, 3073)


def tuples(path):
    store = KVFileStore()
    store.open(str(path), KREAD)
    while (t := store.read()) is not None:
        yield t
    store.close()


def test_converter_metadata():
    conv = CifarConverter()
    assert conv.name == "cifar10" and CifarConverter.type_names == ("cifar10",)
    assert conv.env_subdir == "cifar10" and "cifar-10-binary.tar.gz" in conv.description
    assert list(conv.files) == NAMES
    for sha, size, url in conv.files.values():
        assert len(sha) == 64 and size == 30730000 and url is None  # only a .tar.gz exists


def test_checksums_in_files_match_the_real_data(src):
    from singa_core.commands.datasets import sha256_of

    for name, (sha, size, _) in CifarConverter.files.items():
        assert (src / name).stat().st_size == size
        assert sha256_of(src / name) == sha


def test_registered_as_a_dataset():
    from singa_core.plugin_host.host import get_host

    assert get_host().get("dataset", "cifar10") is CifarConverter


@pytest.mark.parametrize(
    "store, names, n",
    [("train_data.bin", NAMES[:5], 50000), ("test_data.bin", NAMES[5:], 10000)],
)
def test_converted_store(converted, src, store, names, n):
    out, written, messages = converted
    assert written == [out / "train_data.bin", out / "image_mean.bin", out / "test_data.bin"]
    assert any("wrote 50000 records" in m for m in messages)
    assert any("wrote 10000 records" in m for m in messages)
    raw = raw_records(src, names)
    labels = Counter()
    i = -1
    for i, (key, val) in enumerate(tuples(out / store)):
        assert key == b"%05d" % i
        assert val[:7] == HEAD and val[8:11] == b"\x1a\x80\x18"  # pixel: 3072 bytes
        assert val[7] == raw[i, 0] and len(val) == 11 + 3072
        labels[val[7]] += 1
        if i in (0, 1, n - 1):
            rec = common_pb2.RecordProto.FromString(val)
            assert list(rec.shape) == [3, 32, 32] and rec.label == raw[i, 0]
            assert rec.pixel == raw[i, 1:].tobytes() and len(rec.data) == 0
            assert (
                val
                == common_pb2.RecordProto(
                    shape=[3, 32, 32], label=rec.label, pixel=rec.pixel
                ).SerializeToString()
            )
        elif i % 997 == 0:
            assert val[11:] == raw[i, 1:].tobytes()
    assert i == n - 1
    per_class = n // 10
    assert [labels[c] for c in range(10)] == [per_class] * 10


def test_first_labels(converted):
    out = converted[0]
    first = [v[7] for _, v in islice(tuples(out / "train_data.bin"), 10)]
    assert first == [6, 9, 9, 4, 1, 1, 2, 7, 8, 3]
    first = [v[7] for _, v in islice(tuples(out / "test_data.bin"), 10)]
    assert first == [3, 8, 8, 0, 6, 6, 1, 6, 3, 1]


def test_image_mean(converted, src):
    out = converted[0]
    ((key, val),) = list(tuples(out / "image_mean.bin"))
    assert key == b"mean"
    rec = common_pb2.RecordProto.FromString(val)
    assert list(rec.shape) == [3, 32, 32] and len(rec.data) == 3072 and not rec.pixel
    sums = raw_records(src, NAMES[:5])[:, 1:].sum(axis=0, dtype=np.int64)
    got = np.array(rec.data, dtype=np.float32)
    np.testing.assert_array_equal(got, (sums / 50000).astype(np.float32))
    # 0.3 summed and divided in float32; the sums are exact there too, so the same values
    np.testing.assert_array_equal(got, sums.astype(np.float32) / np.float32(50000))
    # kRGBImage's meanfile reader takes the store as it is
    np.testing.assert_array_equal(load_mean_file(str(out / "image_mean.bin")), got)


def copies(src, tmp_path):
    """A --from folder with symlinks to the real files (replace one to damage it)."""
    folder = tmp_path / "raw"
    folder.mkdir()
    for name in NAMES:
        os.symlink(src / name, folder / name)
    out = tmp_path / "out"
    out.mkdir()
    return folder, out


def test_truncated_file_is_a_clear_error_and_nothing_is_written(src, tmp_path):
    folder, out = copies(src, tmp_path)
    bad = folder / "test_batch.bin"
    bad.unlink()
    bad.write_bytes((src / "test_batch.bin").read_bytes()[: 3073 * 500 + 17])
    with pytest.raises(SingaError) as err:
        CifarConverter().convert(folder, out, lambda m: None)
    e = err.value
    assert "test_batch.bin has 1536517 bytes, expected 30730000" in e.message
    assert str(e.where) == str(bad) and "cifar-10-binary.tar.gz" in e.help
    assert os.listdir(out) == []  # sizes are checked before anything is written


def test_missing_file_and_bad_label(src, tmp_path):
    folder, out = copies(src, tmp_path)
    (folder / "data_batch_4.bin").unlink()
    with pytest.raises(SingaError, match="cannot read data_batch_4.bin") as err:
        CifarConverter().convert(folder, out, lambda m: None)
    assert err.value.help
    shutil.copy(src / "data_batch_4.bin", folder / "data_batch_4.bin")
    raw = bytearray((src / "data_batch_4.bin").read_bytes())
    raw[3073 * 123] = 10
    (folder / "data_batch_4.bin").write_bytes(raw)
    with pytest.raises(SingaError) as err:
        CifarConverter().convert(folder, out, lambda m: None)
    assert "data_batch_4.bin: record 123 (byte offset 377979) has label 10" in err.value.message
    assert os.listdir(out) == []  # the half-written train store was discarded


def test_cli(src, tmp_path):
    out = tmp_path / "out"
    res = run_singa("data", "cifar10", "--from", str(src), "--out", str(out))
    assert res.returncode == 0, res.stderr
    said = res.stdout + res.stderr
    for name in ("train_data.bin", "image_mean.bin", "test_data.bin"):
        # each written file is reported once (the converter's own line, or the CLI's)
        lines = [x for x in said.splitlines() if x.startswith("wrote ") and str(out / name) in x]
        assert len(lines) == 1, said
    assert (out / "train_data.bin").stat().st_size == 50000 * (8 + 5 + 8 + 3083 + 4)  # + its CRC-32
    assert (out / "test_data.bin").stat().st_size == 10000 * (8 + 5 + 8 + 3083 + 4)


@pytest.mark.slow
def test_cli_rejects_a_damaged_file(src, tmp_path):
    folder, out = copies(src, tmp_path)
    bad = folder / "data_batch_2.bin"
    bad.unlink()
    bad.write_bytes((src / "data_batch_2.bin").read_bytes()[:1000])
    res = run_singa("data", "cifar10", "--from", str(folder), "--out", str(out))
    assert res.returncode == 2
    assert "data_batch_2.bin has 1000 bytes, expected 30730000" in res.stderr
    assert "Traceback" not in res.stderr
    assert os.listdir(out) == []
    # same size, different bytes: the checksum catches it
    data = bytearray((src / "data_batch_2.bin").read_bytes())
    data[5000] ^= 0xFF
    bad.unlink()
    bad.write_bytes(bytes(data))
    res = run_singa("data", "cifar10", "--from", str(folder), "--out", str(out))
    assert res.returncode == 2
    assert "data_batch_2.bin" in res.stderr and "checksum" in res.stderr
    assert os.listdir(out) == []


def test_no_download_address_says_where_to_get_the_files(tmp_path):
    env = {"SINGA_DATA": str(tmp_path / "none"), "SINGA_CACHE": str(tmp_path / "cache")}
    res = run_singa("data", "cifar10", "--out", str(tmp_path / "out"), env=env)
    assert res.returncode == 2
    assert "cifar-10-binary.tar.gz" in res.stderr and "Traceback" not in res.stderr
