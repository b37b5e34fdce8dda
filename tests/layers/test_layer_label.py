"""kLabel (0.1-style parser): the shard batch's labels as data (float) and aux (int32), read
by a loss layer as its label source."""

from __future__ import annotations

import numpy as np
import pytest
from singa_builtins.layers.label import LabelLayer
from singa_builtins.layers.softmax_loss import SoftmaxLossLayer

from singa_core.errors import SingaError
from singa_core.layer import kForward, kTest, kTrain
from singa_core.schema import common_pb2
from singa_core.testing import GradCase, SourceLayer, build, layer_conf
from tests.layers.test_layer_shard_data import (
    cifar_images,
    ctx,
    image_records,
    numbered,
    shard_layer,
    write_shard,
)


def label_layer(shard):
    layer = LabelLayer(layer_conf('name: "label" type: kLabel'), ctx())
    layer.setup([shard])
    return layer


def run(shard, layer, phase=kTrain):
    shard.forward(phase | kForward, [])
    layer.forward(phase | kForward, [shard])


def test_labels_of_real_cifar_records(tmp_path, data_dir):
    pixels, labels = cifar_images(data_dir, 8)
    shard = shard_layer(
        write_shard(tmp_path / "c", image_records(pixels, labels, (3, 32, 32))), "batchsize: 4"
    )
    layer = label_layer(shard)
    assert LabelLayer.type_names == ("kLabel",)
    assert layer.data.shape == (4,) and layer.data.dtype == np.float32
    assert layer.aux.dtype == np.int32 and layer.grad is None and layer.params == []
    run(shard, layer)
    assert list(layer.aux) == [6, 9, 9, 4]  # CIFAR-10's first training labels
    np.testing.assert_array_equal(layer.data, [6.0, 9.0, 9.0, 4.0])
    assert layer.labels() is layer.aux
    run(shard, layer, kTest)
    assert list(layer.aux) == [1, 1, 2, 7] and list(labels[4:]) == [1, 1, 2, 7]


def test_negative_and_large_labels(tmp_path):
    recs = [common_pb2.RecordProto(shape=[1], label=lab, pixel=b"\x00") for lab in (-3, 0, 70000)]
    shard = shard_layer(write_shard(tmp_path / "n", recs), "batchsize: 3")
    layer = label_layer(shard)
    run(shard, layer)
    assert list(layer.aux) == [-3, 0, 70000] and list(layer.data) == [-3.0, 0.0, 70000.0]


def test_a_loss_layer_reads_the_labels(tmp_path):
    shard = shard_layer(write_shard(tmp_path / "l", numbered(4, (1,))), "batchsize: 4")
    layer = label_layer(shard)
    run(shard, layer)  # labels 0, 1, 2, 3
    logits = SourceLayer(np.eye(4) * 50.0)
    loss = build(SoftmaxLossLayer, 'name: "loss"', [logits, layer])
    loss.forward(kTrain | kForward, [logits, layer])
    assert loss.pop_metrics()["accuracy"] == pytest.approx(1.0)


def test_needs_a_shard_source():
    with pytest.raises(SingaError, match="provides none"):
        label_layer(SourceLayer(np.zeros((2, 1)), labels=[0, 1]))


def _case(tmp_path):
    shard = shard_layer(write_shard(tmp_path / "g", numbered(3)), "batchsize: 2")
    shard.forward(kTrain | kForward, [])
    return GradCase(label_layer(shard), [shard], no_gradient="an input (parser) layer")


GRADIENT_CASES = {"kLabel": _case}
