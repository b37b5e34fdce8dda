"""A safetensors export a user can read without singa (issue 31): every Param with the
layer that owns it, its type and the shapes that layer takes and gives; the data layer's
mean image stored as a tensor; the class names of labels.txt."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import run_singa

from singa_core.plugin_host.host import get_host
from singa_core.schema import common_pb2

safetensors = pytest.importorskip("safetensors")


def _store(path, records):
    store = get_host().get("store", "kvfile")()
    store.open(str(path), 0)
    for i, rec in enumerate(records):
        store.write(f"{i:05d}".encode(), rec.SerializeToString())
    store.close()


JOB = """
name: "tiny"
train_steps: 4
checkpoint_freq: 4
train_one_batch {{ alg: kBP }}
updater {{ type: kSGD learning_rate {{ type: kFixed base_lr: 0.01 }} }}
neuralnet {{
  layer {{
    name: "data" type: kRecordInput
    store_conf {{ backend: "kvfile" path: "{data}" mean_file: "{mean}" batchsize: 4
                 shape: 2 shape: 3 shape: 3 std_value: 64 }}
  }}
  layer {{
    name: "conv1" type: kConvolution srclayers: "data"
    convolution_conf {{ num_filters: 4 kernel: 3 pad: 1 }}
    param {{ name: "wc" init {{ type: kGaussian std: 0.1 }} }}
    param {{ name: "bc" init {{ type: kConstant value: 0 }} }}
  }}
  layer {{
    name: "ip1" type: kInnerProduct srclayers: "conv1"
    innerproduct_conf {{ num_output: 3 }}
    param {{ name: "w1" init {{ type: kGaussian std: 0.1 }} }}
    param {{ name: "b1" init {{ type: kConstant value: 0 }} }}
  }}
  layer {{ name: "loss" type: kSoftmaxLoss srclayers: "ip1" srclayers: "data" }}
}}
cluster {{ workspace: "{ws}" }}
"""


def test_the_export_describes_every_tensor_and_keeps_mean_and_labels(tmp_path):
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, size=(8, 2, 3, 3), dtype=np.uint8)
    recs = []
    for i, px in enumerate(pixels):
        recs.append(common_pb2.RecordProto(shape=[2, 3, 3], label=i % 3, pixel=px.tobytes()))
    _store(tmp_path / "data.bin", recs)
    mean = pixels.reshape(8, -1).mean(axis=0).astype(np.float32)
    _store(tmp_path / "mean.bin", [common_pb2.RecordProto(shape=[2, 3, 3], data=mean)])
    (tmp_path / "labels.txt").write_text("cat\ndog\nowl\n")
    conf = tmp_path / "job.conf"
    conf.write_text(
        JOB.format(data=tmp_path / "data.bin", mean=tmp_path / "mean.bin", ws=tmp_path / "ws")
    )
    res = run_singa("train", str(conf), "--seed", "1", "-q")
    assert res.returncode == 0, res.stderr
    out = tmp_path / "m.safetensors"
    res = run_singa("export", str(conf), "--format", "safetensors", "--out", str(out))
    assert res.returncode == 0, res.stderr
    assert "also preprocess/data/mean" in res.stdout
    from safetensors import safe_open
    from safetensors.numpy import load_file

    tensors = load_file(str(out))
    np.testing.assert_allclose(tensors["preprocess/data/mean"], mean.reshape(2, 3, 3))
    with safe_open(str(out), framework="numpy") as f:
        meta = f.metadata()
    layout = json.loads(meta["tensors"])
    # the convolution's weight is stored flat (F, C*kh*kw); its input says C, H, W
    assert layout["wc"] == {
        "layer": "conv1", "type": "kConvolution", "shape": [4, 18],
        "layer_input": [[2, 3, 3]], "layer_output": [4, 3, 3],
    }  # fmt: skip
    assert tensors["wc"].shape == (4, 18)
    # the inner product reads the convolution's (4, 3, 3) output flattened, row-major
    assert layout["w1"]["layer_input"] == [[4, 3, 3]] and layout["w1"]["shape"] == [3, 36]
    assert json.loads(meta["preprocess"]) == {"data": {"std_value": 64.0}}
    assert json.loads(meta["labels"]) == ["cat", "dog", "owl"]
