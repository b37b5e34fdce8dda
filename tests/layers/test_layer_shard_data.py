"""kShardData (0.1-style data layer): batching, cycling, random skip, partitions, the
shard.dat folder layout, 0.1 Record and bare RecordProto values, resume and errors.

Also holds the helpers the parser-layer tests (kMnist, kRGBImage, kLabel) use to write
shards and build a shard layer.
"""

from __future__ import annotations

import gzip

import numpy as np
import pytest
from singa_builtins.layers.shard_data import ShardDataLayer
from singa_builtins.stores.kvfile import KVFileStore

from singa_core.errors import SingaError
from singa_core.layer import kForward, kTest, kTrain
from singa_core.plugin_host.host import get_host
from singa_core.schema import common_pb2
from singa_core.store import KCREATE
from singa_core.testing import GradCase, layer_conf, make_ctx


# -- helpers shared with the parser-layer tests ---------------------------------------------
def ctx(seed=0, **kw):
    return make_ctx(
        seed, get_plugin=get_host().get, locate=lambda field=None: f"job.conf:{field}", **kw
    )


def write_shard(path, records, *, wrap=True, folder=True):
    """A kvfile of RecordProtos (wrapped in 0.1 ``Record``s if ``wrap``) with keys "%05d";
    ``folder``: a 0.1 DataShard folder ``path/shard.dat``. Returns the path to configure."""
    target = path / "shard.dat" if folder else path
    if folder:
        path.mkdir(parents=True, exist_ok=True)
    store = KVFileStore()
    store.open(str(target), KCREATE)
    for i, rec in enumerate(records):
        msg = common_pb2.Record(image=rec) if wrap else rec
        assert store.write(b"%05d" % i, msg.SerializeToString())
    store.close()
    return path


def shard_layer(path, conf="", *, seed=0, setup=True, **ctxkw):
    text = f'name: "data" type: kShardData sharddata_conf {{ path: "{path}" {conf} }}'
    layer = ShardDataLayer(layer_conf(text), ctx(seed, **ctxkw))
    if setup:
        layer.setup([])
    return layer


def numbered(n, shape=(2, 2)):
    """Records whose label is their index and whose pixels are index + position."""
    size = int(np.prod(shape))
    return [
        common_pb2.RecordProto(
            shape=list(shape), label=i, pixel=bytes((i + j) % 256 for j in range(size))
        )
        for i in range(n)
    ]


def mnist_images(data_dir, n):
    """The first ``n`` real MNIST training images and labels: (uint8 [n, 784], labels)."""
    with gzip.open(data_dir / "mnist" / "train-images-idx3-ubyte.gz") as fh:
        pixels = np.frombuffer(fh.read()[16 : 16 + 784 * n], dtype=np.uint8).reshape(n, 784)
    with gzip.open(data_dir / "mnist" / "train-labels-idx1-ubyte.gz") as fh:
        labels = np.frombuffer(fh.read()[8 : 8 + n], dtype=np.uint8)
    return pixels, labels


def cifar_images(data_dir, n):
    """The first ``n`` real CIFAR-10 training images: (uint8 [n, 3, 32, 32], labels)."""
    with open(data_dir / "cifar10" / "data_batch_1.bin", "rb") as fh:
        raw = np.frombuffer(fh.read(3073 * n), dtype=np.uint8).reshape(n, 3073)
    return raw[:, 1:].reshape(n, 3, 32, 32).copy(), raw[:, 0].copy()


def image_records(pixels, labels, shape):
    return [
        common_pb2.RecordProto(shape=list(shape), label=int(lab), pixel=pix.tobytes())
        for pix, lab in zip(pixels, labels, strict=True)
    ]


def fwd(layer, phase=kTrain):
    layer.forward(phase | kForward, [])
    return [r.label for r in layer.records()]


# -- tests ------------------------------------------------------------------------------------
def test_setup_and_batches(tmp_path):
    layer = shard_layer(write_shard(tmp_path / "shard", numbered(5)), "batchsize: 2")
    assert ShardDataLayer.type_names == ("kShardData",)
    assert layer.data is None and layer.grad is None and layer.params == []
    assert layer.labels() is None and layer.grad_for(layer) is None
    assert layer.batchsize == 2 and layer.one_to_many
    assert list(layer.sample().shape) == [2, 2] and layer.sample().label == 0
    assert fwd(layer) == [0, 1] and layer.keys() == [b"00000", b"00001"]
    assert layer.records()[1].pixel == bytes([1, 2, 3, 4])
    assert fwd(layer) == [2, 3]
    assert fwd(layer, kTest) == [4, 0]  # cycles forever, no shuffling
    assert fwd(layer) == [1, 2]


def test_file_path_and_bare_recordproto_values(tmp_path):
    path = write_shard(tmp_path / "plain.bin", numbered(3), wrap=False, folder=False)
    layer = shard_layer(path, "batchsize: 3")
    assert fwd(layer) == [0, 1, 2]
    assert layer.records()[2].pixel == bytes([2, 3, 4, 5])
    assert layer.sample().label == 0 and list(layer.sample().shape) == [2, 2]


def test_sample_is_a_copy(tmp_path):
    layer = shard_layer(write_shard(tmp_path / "s", numbered(3)), "batchsize: 1")
    fwd(layer)
    fwd(layer)
    assert layer.sample().label == 0  # not overwritten by later batches


def test_random_skip_draws_from_ctx_rng(tmp_path):
    path = write_shard(tmp_path / "s", numbered(50))
    for seed in range(5):
        skip = int(np.random.default_rng(seed).integers(0, 20 + 1))  # U{0..random_skip}
        layer = shard_layer(path, "batchsize: 2 random_skip: 20", seed=seed)
        assert fwd(layer) == [skip, skip + 1]
        assert fwd(layer) == [skip + 2, skip + 3]  # skipped once only


def test_partitioned_batchsize(tmp_path):
    path = write_shard(tmp_path / "s", numbered(4))
    conf = layer_conf(
        f'name: "d" partition_dim: 0 sharddata_conf {{ path: "{path}" batchsize: 6 }}'
    )
    layer = ShardDataLayer(conf, ctx(num_partitions=3))
    layer.setup([])
    assert layer.batchsize == 2
    conf.partition_dim = 1
    layer = ShardDataLayer(conf, ctx(num_partitions=3))
    layer.setup([])
    assert layer.batchsize == 6


def test_resume_continues_with_the_next_record(tmp_path):
    path = write_shard(tmp_path / "s", numbered(7))
    a = shard_layer(path, "batchsize: 3 random_skip: 3", seed=4)
    fwd(a)
    state = a.state_dict()
    assert state["skipped"] is True
    want = fwd(a) + fwd(a)
    b = shard_layer(path, "batchsize: 3 random_skip: 3", seed=99)
    b.load_state_dict(state)
    assert fwd(b) + fwd(b) == want  # no second random skip, same records


def error(tmp_path, conf, srcs=(), records=None, **kw):
    path = write_shard(tmp_path / "e", numbered(3) if records is None else records)
    text = f'name: "data" {conf}'.replace("PATH", str(path))
    layer = ShardDataLayer(layer_conf(text), ctx(**kw))
    with pytest.raises(SingaError) as exc:
        layer.setup(list(srcs))
    return exc.value


def test_errors(tmp_path):
    assert "sharddata_conf.path" in error(tmp_path, "").message
    err = error(tmp_path, 'sharddata_conf { path: "PATH" }')
    assert "batchsize is not set" in err.message and err.where == "job.conf:sharddata_conf"
    assert (
        "batch size must be positive"
        in error(tmp_path, 'sharddata_conf { path: "PATH" batchsize: 0 }').message
    )
    assert (
        "random_skip must be >= 0"
        in error(tmp_path, 'sharddata_conf { path: "PATH" batchsize: 1 random_skip: -1 }').message
    )
    err = error(tmp_path, f'sharddata_conf {{ path: "{tmp_path / "missing"}" batchsize: 1 }}')
    assert "missing" in err.message and err.where == "job.conf:sharddata_conf"
    src = shard_layer(write_shard(tmp_path / "x", numbered(1)), "batchsize: 1")
    assert (
        "0 source" in error(tmp_path, 'sharddata_conf { path: "PATH" batchsize: 1 }', [src]).message
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "shard.dat").write_bytes(b"")
    err = error(tmp_path, f'sharddata_conf {{ path: "{empty}" batchsize: 1 }}')
    assert "has no records" in err.message


def test_bad_record_names_its_key(tmp_path):
    path = tmp_path / "bad"
    path.mkdir()
    store = KVFileStore()
    store.open(str(path / "shard.dat"), KCREATE)
    store.write(b"good", common_pb2.Record(image=numbered(1)[0]).SerializeToString())
    store.write(b"oops", b"\xff\xff\xff")
    store.close()
    layer = shard_layer(path, "batchsize: 1")
    fwd(layer)
    with pytest.raises(SingaError) as exc:
        fwd(layer)
    assert "record 'oops'" in exc.value.message and "neither a Record nor" in exc.value.message
    # a damaged store file is located at the layer's conf
    data = (path / "shard.dat").read_bytes()
    (path / "shard.dat").write_bytes(data[:-2])
    layer = shard_layer(path, "batchsize: 2", setup=False)
    layer.setup([])
    with pytest.raises(SingaError) as exc:
        fwd(layer)
    assert "corrupt kvfile" in exc.value.message


def test_real_mnist_records(tmp_path, data_dir):
    pixels, labels = mnist_images(data_dir, 5)
    path = write_shard(tmp_path / "mnist", image_records(pixels, labels, (28, 28)))
    layer = shard_layer(path, "batchsize: 5")
    assert fwd(layer) == [5, 0, 4, 1, 9]  # MNIST's first training labels
    assert layer.records()[3].pixel == pixels[3].tobytes()


def _case(tmp_path):
    layer = shard_layer(write_shard(tmp_path / "g", numbered(3)), "batchsize: 2")
    assert layer.grad_for(layer) is None
    return GradCase(layer, [], no_gradient="an input layer: no sources, no gradient")


GRADIENT_CASES = {"kShardData": _case}
