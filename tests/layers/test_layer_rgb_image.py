"""kRGBImage (0.1-style parser): mean subtraction (RecordProto file, kvfile store, CaffeBlob
.binaryproto), random crop/mirror in training, central crop otherwise, scaling, on real
CIFAR-10 records read through kShardData; errors."""

from __future__ import annotations

import numpy as np
import pytest
from singa_builtins.layers.rgb_image import RGBImageLayer
from singa_builtins.stores.kvfile import KVFileStore

from singa_core.errors import SingaError
from singa_core.layer import kForward, kTest, kTrain
from singa_core.schema import common_pb2
from singa_core.store import KCREATE
from singa_core.testing import GradCase, SourceLayer, layer_conf
from tests.layers.test_layer_image_preprocess import decode, numbered_images
from tests.layers.test_layer_shard_data import (
    cifar_images,
    ctx,
    image_records,
    numbered,
    shard_layer,
    write_shard,
)


def rgb_layer(shard, conf="", seed=0):
    layer = RGBImageLayer(
        layer_conf(f'name: "rgb" type: kRGBImage rgbimage_conf {{ {conf} }}'), ctx(seed)
    )
    layer.setup([shard])
    return layer


def run(shard, layer, phase=kTrain):
    shard.forward(phase | kForward, [])
    layer.forward(phase | kForward, [shard])
    return layer.data


@pytest.fixture
def cifar(tmp_path, data_dir):
    pixels, labels = cifar_images(data_dir, 6)
    path = write_shard(tmp_path / "cifar", image_records(pixels, labels, (3, 32, 32)))
    return path, pixels


def mean_of(pixels):
    return pixels.reshape(len(pixels), -1).mean(axis=0).astype(np.float32)


def write_mean(tmp_path, mean, kind):
    """The mean in the three formats kRGBImage reads."""
    if kind == "record":  # 0.1: a RecordProto written as the whole file
        path = tmp_path / "image_mean.bin"
        path.write_bytes(common_pb2.RecordProto(shape=[3, 32, 32], data=mean).SerializeToString())
    elif kind == "kvfile":  # 0.3 / singa data cifar10: a store with one tuple "mean"
        path = tmp_path / "mean_store.bin"
        store = KVFileStore()
        store.open(str(path), KCREATE)
        store.write(b"mean", common_pb2.RecordProto(data=mean).SerializeToString())
        store.close()
    else:  # Caffe's mean.binaryproto
        path = tmp_path / "mean.binaryproto"
        blob = common_pb2.CaffeBlob(num=1, channels=3, height=32, width=32, data=mean)
        path.write_bytes(blob.SerializeToString())
    return path


@pytest.mark.parametrize("kind", ["record", "kvfile", "binaryproto"])
def test_mean_central_crop_and_scale_outside_training(cifar, tmp_path, kind):
    path, pixels = cifar
    mean = mean_of(pixels)
    meanfile = write_mean(tmp_path, mean, kind)
    shard = shard_layer(path, "batchsize: 3")
    layer = rgb_layer(shard, f'cropsize: 24 mirror: true scale: 0.5 meanfile: "{meanfile}"')
    assert RGBImageLayer.type_names == ("kRGBImage",)
    assert layer.data.shape == (3, 3, 24, 24) and layer.grad is None and layer.params == []
    assert layer.labels() is None and layer.grad_for(layer) is None
    centred = pixels.astype(np.float32) - mean.reshape(3, 32, 32)
    for batch in (slice(0, 3), slice(3, 6)):
        out = run(shard, layer, kTest)
        np.testing.assert_array_equal(out, centred[batch, :, 4:28, 4:28] * np.float32(0.5))


def test_no_crop_no_mean_keeps_pixels(cifar):
    path, pixels = cifar
    shard = shard_layer(path, "batchsize: 6")
    layer = rgb_layer(shard)
    assert layer.data.shape == (6, 3, 32, 32)
    np.testing.assert_array_equal(run(shard, layer), pixels)  # scale 1, no mirror


def test_training_crop_and_mirror(tmp_path):
    n, side, crop = 600, 4, 2
    images = numbered_images(n, c=3, side=side)
    recs = [common_pb2.RecordProto(shape=[3, side, side], data=im.ravel()) for im in images]
    shard = shard_layer(write_shard(tmp_path / "n", recs), f"batchsize: {n}")
    layer = rgb_layer(shard, f"cropsize: {crop} mirror: true", seed=3)
    found = decode(run(shard, layer), images, crop)
    assert len({h for h, _, _ in found}) == 3
    assert len({w for _, w, _ in found}) == 3  # offsets 0..H−crop, not 0..C−crop as in 0.3
    assert 240 < sum(m for _, _, m in found) < 360
    # the mean is subtracted before cropping: a full C·H·W mean
    mean = np.arange(3 * side * side, dtype=np.float32)
    meanfile = tmp_path / "m.bin"
    meanfile.write_bytes(common_pb2.RecordProto(data=mean).SerializeToString())
    layer = rgb_layer(shard, f'cropsize: {crop} meanfile: "{meanfile}"', seed=3)
    out = run(shard, layer, kTest)
    want = (images - mean.reshape(3, side, side))[:, :, 1:3, 1:3]
    np.testing.assert_array_equal(out, want)


def error(tmp_path, recs, conf="", batch=1):
    shard = shard_layer(write_shard(tmp_path / "e", recs), f"batchsize: {batch}")
    with pytest.raises(SingaError) as exc:
        layer = rgb_layer(shard, conf)
        run(shard, layer)
        run(shard, layer)
    return exc.value


def test_errors(tmp_path):
    good = numbered(2, (3, 4, 4))
    assert "not a [channels, height, width] image" in error(tmp_path, numbered(1, (4, 4))).message
    bad_count = [common_pb2.RecordProto(shape=[3, 4, 4], pixel=bytes(40))]
    assert "not a [channels" in error(tmp_path, bad_count).message
    e = error(tmp_path, good, "cropsize: 5")
    assert "cropsize 5" in e.message and e.where == "job.conf:rgbimage_conf"
    assert "scale is 0" in error(tmp_path, good, "scale: 0").message
    e = error(tmp_path, good, f'meanfile: "{tmp_path / "nope.bin"}"')
    assert "cannot read meanfile" in e.message and e.where == "job.conf:rgbimage_conf"
    short = tmp_path / "short.bin"
    short.write_bytes(common_pb2.RecordProto(data=[1.0] * 16).SerializeToString())
    e = error(tmp_path, good, f'cropsize: 2 meanfile: "{short}"')
    assert "holds 16 values, expected 48" in e.message
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\xff\xff\xff\xff")
    assert "not a RecordProto" in error(tmp_path, good, f'meanfile: "{junk}"').message
    empty = tmp_path / "empty.binaryproto"
    empty.write_bytes(common_pb2.CaffeBlob(num=1).SerializeToString())
    assert "no mean values" in error(tmp_path, good, f'meanfile: "{empty}"').message
    mixed = good + [common_pb2.RecordProto(shape=[3, 4, 4], pixel=bytes(47))]
    e = error(tmp_path, mixed, batch=3)
    assert "record '00002'" in e.message and "47 pixel values, expected 48" in e.message
    with pytest.raises(SingaError, match="provides none"):
        rgb_layer(SourceLayer(np.zeros((2, 3, 4, 4))))


def _case(tmp_path):
    shard = shard_layer(write_shard(tmp_path / "g", numbered(3, (3, 4, 4))), "batchsize: 2")
    shard.forward(kTrain | kForward, [])
    layer = rgb_layer(shard, "cropsize: 3 mirror: true")
    return GradCase(layer, [shard], no_gradient="an input (parser) layer: no gradient")


GRADIENT_CASES = {"kRGBImage": _case}
