"""kRecordInput: SINGA 0.3's test_record_input_layer.cc expectations, plus pixel records,
standardisation, random skip, cycling, resume, errors and decoding speed."""

import json
import struct
import time

import numpy as np
import pytest
from singa_builtins.layers.record_input import RecordInputLayer
from singa_builtins.stores.kvfile import KVFileStore
from singa_builtins.stores.textfile import TextFileStore

from singa_core.errors import SingaError
from singa_core.layer import kDeploy, kForward, kTrain
from singa_core.schema import common_pb2
from singa_core.testing import GradCase, layer_conf, make_ctx

STORES = {"textfile": TextFileStore, "kvfile": KVFileStore}
# test_record_input_layer.cc: the CSV test's three instances as RecordProto.data
INSTANCES = [(12, [3.2, 1, 14.1]), (2, [0.2, 0, 1.1]), (1, [2.2, 1, 4.1])]


def write_kvfile(path, items):
    """A kvfile written byte by byte: [u64 key len][key][u64 value len][value] per tuple."""
    with open(path, "wb") as f:
        for key, value in items:
            key = key.encode() if isinstance(key, str) else key
            f.write(struct.pack("<Q", len(key)) + key + struct.pack("<Q", len(value)) + value)
    return path


def record(label=0, data=None, pixel=None, shape=()):
    rec = common_pb2.RecordProto(label=label, shape=list(shape))
    if data is not None:
        rec.data.extend(data)
    if pixel is not None:
        rec.pixel = bytes(pixel)
    return rec.SerializeToString()


def data_store(tmp_path, name="data.bin"):
    return write_kvfile(
        tmp_path / name, [(str(i), record(lab, data)) for i, (lab, data) in enumerate(INSTANCES)]
    )


def ctx(seed=0, **kw):
    return make_ctx(
        seed,
        get_plugin=lambda kind, name: STORES[name],
        locate=lambda field=None: f"job.conf:{field}",
        **kw,
    )


def rec_layer(path, store="", *, seed=0):
    conf = layer_conf(
        f'name: "rec" type: kRecordInput store_conf {{ backend: "kvfile" path: "{path}" {store} }}'
    )
    layer = RecordInputLayer(conf, ctx(seed))
    layer.setup([])
    return layer


def fwd(layer, phase=kTrain):
    layer.forward(phase | kForward, [])
    return layer.data.reshape(-1)


def test_setup(tmp_path):
    assert RecordInputLayer.type_names == ("kRecordInput",)
    layer = rec_layer(data_store(tmp_path), "batchsize: 2 shape: 3")
    assert layer.aux.size == 2 and layer.data.size == 6 and layer.grad is None


def test_compute_feature(tmp_path):
    layer = rec_layer(data_store(tmp_path), "batchsize: 2 shape: 3")
    data = fwd(layer)
    assert list(layer.labels()) == [12, 2]
    assert data[0] == pytest.approx(3.2) and data[2] == pytest.approx(14.1)
    assert data[3] == pytest.approx(0.2) and data[5] == pytest.approx(1.1)


def test_deploy_same_data_labels_ignored(tmp_path):
    layer = rec_layer(data_store(tmp_path), "batchsize: 2 shape: 3")
    data = fwd(layer, kDeploy)
    assert data[0] == pytest.approx(3.2) and data[2] == pytest.approx(14.1)
    assert data[3] == pytest.approx(0.2) and data[5] == pytest.approx(1.1)
    assert list(layer.aux) == [0, 0]


def test_wrap_around(tmp_path):
    layer = rec_layer(data_store(tmp_path), "batchsize: 2 shape: 3")
    fwd(layer)
    data = fwd(layer)
    assert data[0] == pytest.approx(2.2) and data[2] == pytest.approx(4.1)
    assert data[3] == pytest.approx(3.2) and data[5] == pytest.approx(14.1)
    assert list(layer.aux) == [1, 12]


def test_pixels_and_ignored_record_shape(tmp_path):
    px = np.arange(12, dtype=np.uint8) * 20
    path = write_kvfile(
        tmp_path / "px.bin",
        [
            ("a", record(3, pixel=px, shape=[5, 5])),  # the record's own shape is ignored
            ("b", record(4, pixel=px[::-1])),
            ("c", record(5, data=np.arange(12) / 10)),  # data and pixel records may mix
        ],
    )
    layer = rec_layer(path, "batchsize: 3 shape: 3 shape: 2 shape: 2")
    assert layer.data.shape == (3, 3, 2, 2)
    fwd(layer)
    np.testing.assert_array_equal(layer.data[0].ravel(), px.astype(np.float32))
    np.testing.assert_array_equal(layer.data[1].ravel(), px[::-1].astype(np.float32))
    np.testing.assert_allclose(layer.data[2].ravel(), np.arange(12) / 10, rtol=1e-6)
    assert list(layer.aux) == [3, 4, 5]
    # a batch of pixel records only (decoded in one go)
    layer = rec_layer(path, "batchsize: 2 shape: 12")
    fwd(layer)
    np.testing.assert_array_equal(layer.data, np.stack([px, px[::-1]]).astype(np.float32))
    assert px.max() == 220


def test_mean_std_files_and_values(tmp_path):
    mean = write_kvfile(tmp_path / "mean.bin", [("mean", record(data=[1, 2, 3]))])
    std = write_kvfile(
        tmp_path / "std.bin", [("std", record(data=[2, 4, 0.5])), ("x", record(data=[9, 9, 9]))]
    )
    layer = rec_layer(
        data_store(tmp_path), f'batchsize: 1 shape: 3 mean_file: "{mean}" std_file: "{std}"'
    )
    np.testing.assert_allclose(
        fwd(layer), [(3.2 - 1) / 2, (1 - 2) / 4, (14.1 - 3) / 0.5], rtol=1e-6
    )
    layer = rec_layer(data_store(tmp_path), "batchsize: 1 shape: 3 mean_value: 1 std_value: 4")
    np.testing.assert_allclose(fwd(layer), (np.array([3.2, 1, 14.1]) - 1) / 4, rtol=1e-6)
    layer = rec_layer(data_store(tmp_path), "batchsize: 1 shape: 3 std_value: 0.5")
    np.testing.assert_allclose(fwd(layer), np.array([3.2, 1, 14.1]) * 2, rtol=1e-6)


def test_mnist_style_standardisation(tmp_path):
    px = np.full(784, 255, dtype=np.uint8)
    path = write_kvfile(tmp_path / "m.bin", [(f"{0:08d}", record(7, pixel=px))])
    layer = rec_layer(path, "batchsize: 1 shape: 784 std_value: 255")
    np.testing.assert_allclose(fwd(layer), 1.0)


def test_random_skip_cycling_and_resume(tmp_path):
    path = write_kvfile(tmp_path / "n.bin", [(str(i), record(i, data=[i])) for i in range(9)])
    skip = int(np.random.default_rng(4).integers(0, 6 + 1))
    a = rec_layer(path, "batchsize: 4 shape: 1 random_skip: 6", seed=4)
    fwd(a)
    assert list(a.aux) == [(skip + i) % 9 for i in range(4)]
    fwd(a)
    assert list(a.aux) == [(skip + 4 + i) % 9 for i in range(4)]
    state = json.loads(json.dumps(a.state_dict()))
    b = rec_layer(path, "batchsize: 4 shape: 1 random_skip: 6", seed=123)
    b.load_state_dict(state)
    for _ in range(5):
        np.testing.assert_array_equal(fwd(b), fwd(a))
        np.testing.assert_array_equal(b.aux, a.aux)


def error(tmp_path, items, store):
    path = write_kvfile(tmp_path / "e.bin", items) if items is not None else tmp_path / "no.bin"
    with pytest.raises(SingaError) as exc:
        layer = rec_layer(path, store)
        layer.forward(kTrain | kForward, [])
    assert exc.value.where == "job.conf:store_conf"
    return str(exc.value)


def test_errors(tmp_path):
    assert "no.bin" in error(tmp_path, None, "batchsize: 1 shape: 3")
    msg = error(
        tmp_path,
        [("k0", record(data=[1, 2, 3])), ("k1", record(data=[1, 2]))],
        "batchsize: 2 shape: 3",
    )
    assert "record 'k1'" in msg and "has 2 data values, expected 3" in msg
    assert "layer 'rec'" in msg
    msg = error(tmp_path, [("k7", record(pixel=b"\x01\x02"))], "batchsize: 1 shape: 3")
    assert "record 'k7'" in msg and "2 pixel values" in msg
    assert "neither data nor pixel" in error(
        tmp_path, [("z", record(label=1))], "batchsize: 1 shape: 3"
    )
    assert "not a RecordProto" in error(
        tmp_path, [("bad", b"\xff\xff\xff")], "batchsize: 1 shape: 1"
    )
    assert "backend" in str(
        pytest.raises(
            SingaError,
            RecordInputLayer(
                layer_conf('name: "r" store_conf { path: "x" batchsize: 1 }'), ctx()
            ).setup,
            [],
        ).value
    )
    mean = write_kvfile(tmp_path / "mean.bin", [("m", record(data=[1, 2]))])
    assert "holds 2 values, expected 3" in error(
        tmp_path, [("0", record(data=[1, 2, 3]))], f'batchsize: 1 shape: 3 mean_file: "{mean}"'
    )
    empty = write_kvfile(tmp_path / "empty.bin", [])
    assert "is empty" in error(
        tmp_path, [("0", record(data=[1]))], f'batchsize: 1 shape: 1 std_file: "{empty}"'
    )


def test_corrupt_store_is_a_singa_error(tmp_path):
    path = data_store(tmp_path)
    with open(path, "ab") as f:
        f.write(struct.pack("<Q", 100) + b"abc")  # truncated tuple at the end
    layer = rec_layer(path, "batchsize: 2 shape: 3")
    fwd(layer)
    with pytest.raises(SingaError) as exc:
        fwd(layer)
    assert "data.bin" in str(exc.value)  # located at the data file (or the layer's conf)


def test_decodes_a_batch_of_64_mnist_records_fast(tmp_path):
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (200, 784), dtype=np.uint8)
    items = [
        (f"{i:08d}", record(int(rng.integers(10)), pixel=pixels[i], shape=[28, 28]))
        for i in range(200)
    ]
    layer = rec_layer(
        write_kvfile(tmp_path / "mnist.bin", items),
        "batchsize: 64 shape: 28 shape: 28 std_value: 255",
    )
    best = float("inf")
    for _ in range(30):
        t = time.perf_counter()
        fwd(layer)
        best = min(best, time.perf_counter() - t)
    assert best < 1e-3, f"{best * 1e6:.0f} us per batch"


def _case(tmp_path):
    layer = rec_layer(data_store(tmp_path), "batchsize: 2 shape: 3")
    assert layer.grad_for(layer) is None
    return GradCase(layer, [], no_gradient="an input layer: no sources, no gradient")


GRADIENT_CASES = {"kRecordInput": _case}
