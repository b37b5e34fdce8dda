"""kMnist (0.1-style parser): x = pixel / norm_a − norm_b on real MNIST records read through
kShardData, float records, shapes, errors, and the 0.1 MNIST job layout end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest
from singa_builtins.layers.mnist import MnistLayer
from typer.testing import CliRunner

from singa_core.commands.cli import app
from singa_core.errors import SingaError
from singa_core.layer import kForward, kTest, kTrain
from singa_core.schema import common_pb2
from singa_core.testing import GradCase, SourceLayer, layer_conf
from tests.layers.test_layer_shard_data import (
    ctx,
    image_records,
    mnist_images,
    numbered,
    shard_layer,
    write_shard,
)


def mnist_layer(shard, conf="", *, setup=True):
    layer = MnistLayer(layer_conf(f'name: "mnist" type: kMnist {conf}'), ctx())
    if setup:
        layer.setup([shard])
    return layer


def run(shard, layer, phase=kTrain):
    shard.forward(phase | kForward, [])
    layer.forward(phase | kForward, [shard])
    return layer.data


def test_real_mnist_with_the_01_job_normalisation(tmp_path, data_dir):
    pixels, labels = mnist_images(data_dir, 6)
    shard = shard_layer(
        write_shard(tmp_path / "m", image_records(pixels, labels, (28, 28))), "batchsize: 3"
    )
    layer = mnist_layer(shard, "mnist_conf { norm_a: 127.5 norm_b: 1 }")
    assert MnistLayer.type_names == ("kMnist",)
    assert layer.data.shape == (3, 1, 28, 28) and layer.data.dtype == np.float32
    assert layer.grad is None and layer.params == [] and layer.labels() is None
    assert shard.grad_for(layer) is None and layer.grad_for(layer) is None
    for batch in (pixels[:3], pixels[3:]):
        got = run(shard, layer).copy()
        want = batch.astype(np.float32) / np.float32(127.5) - np.float32(1)  # C++ float math
        np.testing.assert_array_equal(got.reshape(3, 784), want)
    assert got.min() == -1.0 and got.max() == 1.0
    assert got[0, 0, 14, 14] == pytest.approx(pixels[3, 14 * 28 + 14] / 127.5 - 1)


def test_defaults_keep_pixels_and_float_records(tmp_path):
    recs = numbered(2, (3, 3))
    recs[1] = common_pb2.RecordProto(shape=[3, 3], data=[0.5 * j for j in range(9)])
    shard = shard_layer(write_shard(tmp_path / "m", recs), "batchsize: 2")
    layer = mnist_layer(shard)  # norm_a 1, norm_b 0
    data = run(shard, layer, kTest)
    np.testing.assert_array_equal(data[0, 0], np.arange(9).reshape(3, 3))
    np.testing.assert_array_equal(data[1, 0], 0.5 * np.arange(9).reshape(3, 3))
    layer = mnist_layer(shard, "mnist_conf { norm_a: 2 norm_b: 0.25 }")
    data = run(shard, layer)
    np.testing.assert_allclose(data[0, 0].ravel(), (np.arange(9) + 0) / 2 - 0.25)
    np.testing.assert_allclose(data[1, 0].ravel(), 0.25 * np.arange(9) - 0.25)


def test_size_from_the_pixel_count_without_a_shape(tmp_path):
    recs = [common_pb2.RecordProto(label=1, pixel=bytes(range(16)))]
    shard = shard_layer(write_shard(tmp_path / "m", recs), "batchsize: 1")
    layer = mnist_layer(shard)
    assert layer.data.shape == (1, 1, 4, 4)
    np.testing.assert_array_equal(run(shard, layer).ravel(), np.arange(16))


def error(tmp_path, recs, conf="", batch=1):
    shard = shard_layer(write_shard(tmp_path / "e", recs), f"batchsize: {batch}")
    with pytest.raises(SingaError) as exc:
        layer = mnist_layer(shard, conf)
        run(shard, layer)
        run(shard, layer)
    return exc.value


def test_errors(tmp_path):
    assert "not a square image" in error(tmp_path, numbered(1, (2, 3))).message
    assert "not a square image" in error(tmp_path, numbered(1, (5,))).message
    err = error(tmp_path, numbered(1, (2, 2)), "mnist_conf { norm_a: 0 }")
    assert "norm_a" in err.message and err.where == "job.conf:mnist_conf.norm_a"
    recs = numbered(2, (2, 2))
    recs[1] = common_pb2.RecordProto(shape=[2, 2], pixel=b"\x01\x02\x03")
    err = error(tmp_path, recs)
    assert "record '00001'" in err.message and "has 3 pixel values, expected 4" in err.message
    recs[1] = common_pb2.RecordProto(shape=[2, 2], label=3)
    assert "neither pixel nor data" in error(tmp_path, recs).message
    with pytest.raises(SingaError, match="provides none") as exc:
        mnist_layer(SourceLayer(np.zeros((2, 4))))
    assert exc.value.help and "kShardData" in exc.value.help
    with pytest.raises(SingaError, match="1 source"):
        mnist_layer(None, setup=False).setup([])


JOB = """
name: "mnist-0.1"
train_steps: 60
disp_freq: 20
test_steps: 4
test_freq: 30
train_one_batch {{ alg: kBP }}
updater {{ type: kSGD learning_rate {{ type: kFixed base_lr: 0.05 }} }}
neuralnet {{
  layer {{ name: "data" type: kShardData
          sharddata_conf {{ path: "{shard}" batchsize: 50 random_skip: 100 }} }}
  layer {{ name: "mnist" type: kMnist srclayers: "data"
          mnist_conf {{ norm_a: 127.5 norm_b: 1 }} }}
  layer {{ name: "label" type: kLabel srclayers: "data" }}
  layer {{ name: "fc1" type: kInnerProduct srclayers: "mnist" innerproduct_conf {{ num_output: 10 }}
          param {{ name: "w1" init {{ type: kUniform low: -0.05 high: 0.05 }} }}
          param {{ name: "b1" init {{ type: kConstant value: 0 }} }} }}
  layer {{ name: "loss" type: kSoftmaxLoss srclayers: "fc1" srclayers: "label" }}
}}
cluster {{ workspace: "{ws}" }}
"""


def test_01_mnist_job_layout_trains(tmp_path, data_dir):
    """kShardData + kMnist + kLabel as in SINGA 0.1's MNIST job, on 2000 real images."""
    pixels, labels = mnist_images(data_dir, 2000)
    shard = write_shard(tmp_path / "train_shard", image_records(pixels, labels, (28, 28)))
    conf = tmp_path / "job.conf"
    ws = tmp_path / "ws"
    conf.write_text(JOB.format(shard=shard, ws=ws))
    res = CliRunner().invoke(app, ["train", str(conf), "--seed", "0"])
    assert res.exit_code == 0, res.output
    records = [json.loads(x) for x in (ws / "metrics.jsonl").read_text().splitlines()]
    tests = [r for r in records if r.get("phase") == "test"]
    assert tests[0]["accuracy"] < 0.3 and tests[-1]["accuracy"] > 0.6, tests


def _case(tmp_path):
    shard = shard_layer(write_shard(tmp_path / "g", numbered(3, (3, 3))), "batchsize: 2")
    shard.forward(kTrain | kForward, [])
    layer = mnist_layer(shard)
    return GradCase(layer, [shard], no_gradient="an input (parser) layer: no gradient")


GRADIENT_CASES = {"kMnist": _case}
