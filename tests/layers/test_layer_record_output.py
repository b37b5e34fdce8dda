"""kRecordOutput: one RecordProto per instance (data, label when the source has labels),
keys = instance counter, kvfile by default; byte-identical to protobuf's serialization and
read back by kRecordInput; errors."""

from __future__ import annotations

import numpy as np
import pytest
from singa_builtins.layers.record_input import RecordInputLayer
from singa_builtins.layers.record_output import RecordOutputLayer
from singa_builtins.stores.kvfile import KVFileStore

from singa_core.errors import SingaError
from singa_core.layer import kForward, kTest
from singa_core.schema import common_pb2
from singa_core.store import KREAD
from singa_core.testing import GradCase, SourceLayer, layer_conf
from tests.layers.test_layer_shard_data import ctx


def rec_out(path, src, store="", *, setup=True):
    conf = layer_conf(f'name: "rec" type: kRecordOutput store_conf {{ path: "{path}" {store} }}')
    layer = RecordOutputLayer(conf, ctx())
    if setup:
        layer.setup([src])
    return layer


def run(layer, src):
    layer.forward(kTest | kForward, [src])


def tuples(path):
    store = KVFileStore()
    store.open(str(path), KREAD)
    out = []
    while (t := store.read()) is not None:
        out.append(t)
    store.close()
    return out


def test_records_with_labels(tmp_path):
    data = np.random.default_rng(0).standard_normal((3, 2, 2)).astype(np.float32)
    src = SourceLayer(data, labels=[0, 7, -2])
    path = tmp_path / "out.bin"
    layer = rec_out(path, src)
    assert RecordOutputLayer.type_names == ("kRecordOutput",)
    assert layer.data is None and layer.params == [] and layer.grad_for(layer) is None
    run(layer, src)
    run(layer, src)
    layer.close()
    got = tuples(path)
    assert [k for k, _ in got] == [b"0", b"1", b"2", b"3", b"4", b"5"]
    for i, (_, value) in enumerate(got):
        want = common_pb2.RecordProto(label=[0, 7, -2][i % 3], data=data[i % 3].ravel())
        assert value == want.SerializeToString()  # label 0 is written too, as set_label(0)
        rec = common_pb2.RecordProto.FromString(value)
        assert rec.HasField("label") and list(rec.shape) == []
        np.testing.assert_array_equal(np.array(rec.data, dtype=np.float32), data[i % 3].ravel())


def test_records_without_labels(tmp_path):
    src = SourceLayer(np.array([[1.0, 2.0, 3.0]]))
    path = tmp_path / "out.bin"
    layer = rec_out(path, src, 'backend: "kvfile"')
    run(layer, src)
    layer.close()
    ((key, value),) = tuples(path)
    assert key == b"0" and value == common_pb2.RecordProto(data=[1, 2, 3]).SerializeToString()
    assert not common_pb2.RecordProto.FromString(value).HasField("label")


def test_read_back_by_record_input(tmp_path):
    data = np.random.default_rng(1).standard_normal((4, 3, 2, 2)).astype(np.float32)
    src = SourceLayer(data, labels=[3, 1, 4, 1])
    path = tmp_path / "features.bin"
    layer = rec_out(path, src)
    run(layer, src)
    layer.close()
    conf = layer_conf(
        f'name: "in" type: kRecordInput store_conf {{ backend: "kvfile" path: "{path}" '
        "batchsize: 4 shape: 3 shape: 2 shape: 2 }"
    )
    reader = RecordInputLayer(conf, ctx())
    reader.setup([])
    reader.forward(kTest | kForward, [])
    np.testing.assert_array_equal(reader.data, data)
    assert list(reader.aux) == [3, 1, 4, 1]


def test_errors(tmp_path):
    src = SourceLayer(np.array([[1.0, 10.0]]))
    with pytest.raises(SingaError, match="nosuch"):
        rec_out(tmp_path / "x.bin", src, 'backend: "nosuch"')
    with pytest.raises(SingaError, match="store_conf.path"):
        RecordOutputLayer(layer_conf('name: "r"'), ctx()).setup([src])
    # a textfile store refuses a value holding a newline byte (0x0a); this float has one
    src = SourceLayer(np.frombuffer(b"\x0a\x00\x00\x00", dtype="<f4").reshape(1, 1))
    layer = rec_out(tmp_path / "x.txt", src, 'backend: "textfile"')
    with pytest.raises(SingaError, match="refused instance 0"):
        run(layer, src)


def _case(tmp_path):
    src = SourceLayer(np.random.default_rng(0).standard_normal((2, 3)), labels=[0, 1])
    layer = rec_out(tmp_path / "g.bin", src)
    return GradCase(layer, [src], no_gradient="an output layer: it writes a file")


GRADIENT_CASES = {"kRecordOutput": _case}
