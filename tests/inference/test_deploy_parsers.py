"""0.1-style nets (kShardData + kMnist/kRGBImage + kLabel) predict: the parser layers become
the deploy net's inputs, fed raw pixels and preprocessed as records are (norm, mean file,
central crop, scale); their sample shape is given, since they learn it from records."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import run_singa
from layers.test_layer_shard_data import (
    cifar_images,
    ctx,
    image_records,
    mnist_images,
    shard_layer,
    write_shard,
)

from singa_core import Job
from singa_core.errors import SingaError
from singa_core.layer import kDeploy, kForward, kTest
from singa_core.plugin_host.host import get_host
from singa_core.testing import layer_conf, run_job


def _parser(type_name, conf, **kw):
    return get_host().get("layer", type_name)(layer_conf(conf), ctx(**kw))


@pytest.mark.parametrize(
    "type_name,conf,images,shape",
    [
        ("kMnist", 'name: "m" mnist_conf { norm_a: 127.5 norm_b: 1 }', "mnist", (28, 28)),
        (
            "kRGBImage",
            'name: "r" rgbimage_conf { cropsize: 24 scale: 0.5 mirror: true }',
            "cifar",
            (3, 32, 32),
        ),
    ],
)
def test_fed_pixels_equal_parsed_records(tmp_path, data_dir, type_name, conf, images, shape):
    pixels, labels = (mnist_images if images == "mnist" else cifar_images)(data_dir, 6)
    shard = write_shard(tmp_path / "s", image_records(pixels, labels, shape))
    src = shard_layer(shard, "batchsize: 6")
    parsed = _parser(type_name, conf, phase=kTest)
    parsed.setup([src])
    src.forward(kTest | kForward, [])
    parsed.forward(kTest | kForward, [src])
    fed = _parser(type_name, conf, phase=kDeploy, batchsize=6, sample_shape=shape)
    fed.setup([])
    assert fed.sample_shape() == shape
    fed.feed(pixels.reshape(6, *shape).astype(np.float32))
    assert np.array_equal(fed.data, parsed.data)


def test_a_parser_without_a_sample_shape_says_how_to_give_it():
    layer = _parser("kMnist", 'name: "m"', phase=kDeploy, batchsize=2)
    with pytest.raises(SingaError, match="give the size of one raw sample") as exc:
        layer.setup([])
    assert "--sample-shape 28 --sample-shape 28" in exc.value.help


def test_a_01_style_job_predicts_and_exports(tmp_path, data_dir):
    pixels, labels = mnist_images(data_dir, 200)
    shard = write_shard(tmp_path / "train", image_records(pixels, labels, (28, 28)))
    conf = f"""
name: "mnist-0.1"
train_steps: 30
test_steps: 2
test_freq: 30
train_one_batch {{ alg: kBP }}
updater {{ type: kSGD learning_rate {{ type: kFixed base_lr: 0.01 }} }}
neuralnet {{
  layer {{ name: "data" type: kShardData sharddata_conf {{ path: "{shard}" batchsize: 50 }} }}
  layer {{ name: "mnist" type: kMnist srclayers: "data" mnist_conf {{ norm_a: 255 }} }}
  layer {{ name: "label" type: kLabel srclayers: "data" }}
  layer {{ name: "ip" type: kInnerProduct srclayers: "mnist" innerproduct_conf {{ num_output: 10 }}
          param {{ name: "w" init {{ type: kGaussian std: 0.01 }} }}
          param {{ name: "b" init {{ type: kConstant value: 0 }} }} }}
  layer {{ name: "loss" type: kSoftmaxLoss srclayers: "ip" srclayers: "label" }}
}}
"""
    run = run_job(conf, tmp_path / "job")
    job = Job.from_file(tmp_path / "job" / "job.conf", workspace=run.workspace)
    with pytest.raises(SingaError, match="give the size of one raw sample"):
        job.model()
    model = job.model(sample_shape=(28, 28))
    assert model.plan.inputs == ["mnist"] and set(model.plan.dropped) == {"data", "label"}
    probs = model.predict(pixels.reshape(200, 28, 28))
    assert (probs.argmax(1) == labels).mean() > 0.5  # 30 steps of 50 on these 200
    pytest.importorskip("onnxruntime")
    import onnxruntime as ort

    out = tmp_path / "m.onnx"
    res = run_singa(
        "export",
        str(tmp_path / "job" / "job.conf"),
        "--workspace",
        str(run.workspace),
        "--out",
        str(out),
        "--sample-shape",
        "28",
        "--sample-shape",
        "28",
    )
    assert res.returncode == 0, res.stderr
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    got = session.run(["output"], {"input": pixels[:64].reshape(64, 28, 28).astype(np.float32)})
    assert np.abs(got[0] - probs[:64]).max() < 1e-5
