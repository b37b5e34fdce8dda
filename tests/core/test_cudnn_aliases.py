"""cuDNN layer type names run their CPU implementations, with a one-line notice each."""

import numpy as np
import pytest

from tests.conftest import run_singa


def cnn_conf(data, workspace, types):
    conv, pool, act, loss = types
    return f"""
name: "tiny-cnn"
train_steps: 30
disp_freq: 10
train_one_batch {{ alg: kBP }}
updater {{ type: kSGD momentum: 0.9 learning_rate {{ type: kFixed base_lr: 0.05 }} }}
neuralnet {{
  layer {{
    name: "data" type: kCSVInput
    store_conf {{ backend: "textfile" path: "{data}" batchsize: 10 shape: 1 shape: 4 shape: 4 }}
  }}
  layer {{
    name: "conv" type: {conv} srclayers: "data"
    convolution_conf {{ num_filters: 3 kernel: 3 pad: 1 }}
    param {{ name: "w1" init {{ type: kGaussian std: 0.1 }} }}
    param {{ name: "b1" init {{ type: kConstant value: 0 }} }}
  }}
  layer {{ name: "act" type: {act} srclayers: "conv" activation_conf {{ type: RELU }} }}
  layer {{ name: "pool" type: {pool} srclayers: "act" pooling_conf {{ kernel: 2 stride: 2 }} }}
  layer {{
    name: "ip" type: kInnerProduct srclayers: "pool"
    innerproduct_conf {{ num_output: 2 }}
    param {{ name: "w2" init {{ type: kGaussian std: 0.1 }} }}
    param {{ name: "b2" init {{ type: kConstant value: 0 }} }}
  }}
  layer {{ name: "loss" type: {loss} srclayers: "ip" srclayers: "data" }}
}}
cluster {{ workspace: "{workspace}" }}
"""


def write_data(path, n=40, seed=0):
    rng = np.random.default_rng(seed)
    lines = []
    for _ in range(n):
        label = int(rng.integers(0, 2))
        img = rng.normal(size=16) + (1.5 if label else -1.5)
        lines.append(",".join([str(label), *(f"{v:.4f}" for v in img)]))
    path.write_text("\n".join(lines) + "\n")
    return path


CUDNN = ("kCudnnConv", "kCudnnPool", "kCudnnActivation", "kCudnnSoftmaxLoss")
CPU = ("kCConvolution", "kCPooling", "kActivation", "kSoftmaxLoss")


@pytest.mark.slow
def test_cudnn_names_train_like_the_cpu_types_with_one_notice_each(tmp_path):
    data = write_data(tmp_path / "d.csv")
    results = {}
    for label, types in (("cudnn", CUDNN), ("cpu", CPU)):
        conf = tmp_path / f"{label}.conf"
        conf.write_text(cnn_conf(data, tmp_path / f"ws-{label}", types))
        proc = run_singa("train", str(conf), "--seed", "3", "-q")
        assert proc.returncode == 0, proc.stderr
        results[label] = proc
    notices = [line for line in results["cudnn"].stderr.splitlines() if line.startswith("note:")]
    assert len(notices) == 4, notices
    for alias, cpu in zip(CUDNN, CPU, strict=True):
        assert any(f"{alias} runs as {cpu}" in n and "CPU" in n for n in notices), notices
    assert "note:" not in results["cpu"].stderr
    # the same seed gives the same checkpoint under either name
    a = (tmp_path / "ws-cudnn" / "checkpoint" / "step30-worker0").read_bytes()
    b = (tmp_path / "ws-cpu" / "checkpoint" / "step30-worker0").read_bytes()
    assert a == b
