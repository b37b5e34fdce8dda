"""kRecordInput's same-layout fast path (plugins/layers/_record_layout.py): a block of
``singa data``-style RecordProto values decodes to what protobuf reads from each, and
any value that differs in structure (a label of 128 or more, another field, float data,
other lengths) makes the block decline, so the value-by-value path (and its errors) runs."""

from __future__ import annotations

import numpy as np
import pytest
from singa_builtins.layers._record_layout import layout_of
from singa_builtins.layers.record_input import RecordInputLayer
from singa_builtins.stores.kvfile import KVFileStore

from singa_core.errors import SingaError
from singa_core.layer import kForward, kTrain
from singa_core.schema import common_pb2
from singa_core.store import KCREATE
from singa_core.testing import layer_conf, make_ctx


def record(label=None, pixel=None, shape=(), data=None) -> bytes:
    rec = common_pb2.RecordProto(shape=list(shape))
    if label is not None:
        rec.label = label
    if pixel is not None:
        rec.pixel = bytes(pixel)
    if data is not None:
        rec.data.extend(data)
    return rec.SerializeToString()


def block_of(values) -> np.ndarray:
    return np.array([np.frombuffer(v, dtype=np.uint8) for v in values])


def protobuf_reads(values, n):
    rows = np.zeros((len(values), n), np.float32)
    labels = np.zeros(len(values), np.int32)
    rec = common_pb2.RecordProto()
    for i, v in enumerate(values):
        rec.ParseFromString(v)
        rows[i] = np.frombuffer(rec.pixel, dtype=np.uint8)
        labels[i] = rec.label
    return rows, labels


@pytest.mark.parametrize("shape", [(), (28, 28), (3, 32, 32)])
def test_a_block_decodes_to_what_protobuf_reads(shape):
    rng = np.random.default_rng(1)
    n = int(np.prod(shape)) if shape else 50
    # labels 0..127, pixels that contain the tag and label bytes too
    values = [record(int(lab), rng.integers(0, 256, n, dtype=np.uint8).tobytes(), shape)
              for lab in [0, 127, 16, 26] + list(rng.integers(0, 128, 60))]  # fmt: skip
    layout = layout_of(values[3], n)
    rows, labels = np.zeros((64, n), np.float32), np.zeros(64, np.int32)
    assert layout.decode(block_of(values), rows, labels)
    want_rows, want_labels = protobuf_reads(values, n)
    np.testing.assert_array_equal(rows, want_rows)
    np.testing.assert_array_equal(labels, want_labels)


def test_values_of_another_structure_are_declined():
    px = bytes(range(20))
    layout = layout_of(record(3, px, (4, 5)), 20)
    rows, labels = np.zeros((2, 20), np.float32), np.zeros(2, np.int32)
    good = record(5, px[::-1], (4, 5))
    for other in (
        record(200, px, (4, 5)),  # a two-byte label varint
        record(5, px, (5, 4)),  # another shape field
        record(None, px + b"\x00", (4,)),  # no label, one pixel more: same length
    ):
        values = block_of([good, other] if len(other) == len(good) else [other] * 2)
        before = rows.copy()
        assert not layout.decode(values, rows, labels)
        np.testing.assert_array_equal(rows, before)  # nothing written
    assert layout.decode(block_of([good, good]), rows, labels)
    assert layout_of(record(3, shape=(), data=[1.0] * 20), 20) is None  # float data
    assert layout_of(record(300, px), 20) is None  # the learnt label is not one byte
    assert layout_of(record(3, px), 21) is None  # another pixel count
    assert layout_of(b"\xff\xff", 20) is None  # not a RecordProto
    no_label = layout_of(record(None, px), 20)
    assert no_label.decode(block_of([record(None, px)] * 2), rows, None)
    assert not no_label.decode(block_of([record(None, px)] * 2), rows, labels)


def write_store(path, values):
    s = KVFileStore()
    s.open(str(path), KCREATE)
    for i, v in enumerate(values):
        assert s.write(b"%05d" % i, v)
    s.close()
    return path


def layer_on(path, batch, shape):
    dims = " ".join(f"shape: {d}" for d in shape)
    conf = layer_conf(
        f'name: "rec" type: kRecordInput store_conf {{ backend: "kvfile" path: "{path}" '
        f"batchsize: {batch} {dims} std_value: 255 }}"
    )
    from singa_core.plugin_host.host import get_host

    host = get_host()
    layer = RecordInputLayer(conf, make_ctx(0, get_plugin=host.get))
    layer.setup([])
    return layer


def test_the_layer_reads_the_same_batches_both_ways(tmp_path):
    rng = np.random.default_rng(2)
    values = [record(int(rng.integers(10)), rng.integers(0, 256, 12, dtype=np.uint8), (3, 4))
              for _ in range(25)]  # fmt: skip
    values[13] = record(7, rng.integers(0, 256, 12, dtype=np.uint8), (12,))  # another layout
    path = write_store(tmp_path / "s.bin", values)
    want_rows, want_labels = protobuf_reads(values, 12)
    layer = layer_on(path, 5, (3, 4))
    for b in range(10):  # two passes: blocks, a declined block, the wrap-around
        layer.forward(kTrain | kForward, [])
        i = [(b * 5 + k) % 25 for k in range(5)]
        np.testing.assert_allclose(layer.data.reshape(5, 12), want_rows[i] / 255, rtol=1e-6)
        np.testing.assert_array_equal(layer.aux.reshape(-1), want_labels[i])


def test_a_bad_record_in_a_block_still_names_itself(tmp_path):
    values = [record(1, bytes(12), (12,))] * 4 + [record(None, bytes(12), (12,))]
    layer = layer_on(write_store(tmp_path / "s.bin", values), 5, (12,))
    with pytest.raises(SingaError, match="record '00004'.*no label"):
        layer.forward(kTrain | kForward, [])
