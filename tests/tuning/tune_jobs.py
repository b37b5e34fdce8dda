"""Small MNIST jobs and spaces for the singa tune tests (real MNIST, a few steps)."""

from __future__ import annotations

from pathlib import Path

SPACE = """\
param { field: "updater.learning_rate.base_lr" log_uniform { low: 0.001 high: 0.3 } }
param { field: "updater.momentum" uniform { low: 0 high: 0.9 } }
param { field: "neuralnet.layer[2].innerproduct_conf.num_output" int { low: 16 high: 64 } }
objective { metric: "accuracy" }
budget { trials: 4 }
"""


def mnist_job(folder: Path, stores: Path, steps: int = 60, test_freq: int = 30) -> Path:
    """A small MLP on SINGA's MNIST stores (784-H-10), its workspace in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    conf = folder / "job.conf"
    data = (
        'store_conf {{ backend: "kvfile" path: "{path}" batchsize: {b} shape: 784 '
        "std_value: 127.5 mean_value: 127.5 }}"
    )
    conf.write_text(f"""name: "small-mlp"
train_steps: {steps}
test_steps: 5
test_freq: {test_freq}
disp_freq: {test_freq}
train_one_batch {{ alg: kBP }}
updater {{ type: kSGD momentum: 0.5 learning_rate {{ type: kFixed base_lr: 0.01 }} }}
neuralnet {{
  layer {{ name: "data" type: kRecordInput include: kTrain
    {data.format(path=stores / "train_data.bin", b=64)} }}
  layer {{ name: "data" type: kRecordInput include: kTest
    {data.format(path=stores / "test_data.bin", b=100)} }}
  layer {{ name: "fc1" type: kInnerProduct srclayers: "data" innerproduct_conf {{ num_output: 32 }}
    param {{ name: "w1" init {{ type: kUniform low: -0.05 high: 0.05 }} }}
    param {{ name: "b1" init {{ type: kConstant value: 0 }} }} }}
  layer {{ name: "tanh1" type: kSTanh srclayers: "fc1" }}
  layer {{ name: "fc2" type: kInnerProduct srclayers: "tanh1" innerproduct_conf {{ num_output: 10 }}
    param {{ name: "w2" init {{ type: kUniform low: -0.05 high: 0.05 }} }}
    param {{ name: "b2" init {{ type: kConstant value: 0 }} }} }}
  layer {{ name: "loss" type: kSoftmaxLoss softmaxloss_conf {{ topk: 1 }}
    srclayers: "fc2" srclayers: "data" }}
}}
cluster {{ workspace: "{folder / "ws"}" }}
""")
    return conf


def space_file(folder: Path, text: str = SPACE, name: str = "space.conf") -> Path:
    path = folder / name
    path.write_text(text)
    return path
