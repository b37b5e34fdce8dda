"""FooScale, row-independent, runs its unrolled copies as one wide instance of itself (no
run code): an unrolled net trained with SINGA_SEQUENCE_RUNS=0 (copy by copy) and with
units, on the CPU and the stand-in device (where its sources are device copies): the same
Params."""

import numpy as np
import pytest
from singa_core.testing import blobs_csv, run_job

from acme import scale_run

JOB = """
name: "runs"
train_steps: 3
checkpoint_freq: 3
train_one_batch {{ alg: kBPTT }}
updater {{ type: kSGD momentum: 0.9 learning_rate {{ type: kFixed base_lr: 0.05 }} }}
neuralnet {{
  unroll_len: 4
  layer {{
    name: "data" type: kCSVInput unroll_len: 1
    store_conf {{ backend: "textfile" path: "{data}" batchsize: 6 shape: 4 }}
  }}
  layer {{ name: "emb" type: kDummy srclayers: "data" unroll_conn_type: kUnrollOneToAll }}
  layer {{
    name: "ip0" type: kInnerProduct srclayers: "emb"
    innerproduct_conf {{ num_output: 5 }}
    param {{ name: "w0" init {{ type: kUniform low: -0.3 high: 0.3 }} }}
    param {{ name: "b0" init {{ type: kUniform low: -0.1 high: 0.1 }} }}
  }}
  layer {{ name: "scaled" user_type: "kFooScale" srclayers: "ip0" }}
  layer {{
    name: "out" type: kInnerProduct srclayers: "scaled"
    innerproduct_conf {{ num_output: 3 }}
    param {{ name: "w" init {{ type: kUniform low: -0.3 high: 0.3 }} }}
    param {{ name: "b" init {{ type: kUniform low: -0.1 high: 0.1 }} }}
  }}
  layer {{
    name: "loss" type: kSoftmaxLoss srclayers: "out" srclayers: "data"
    unroll_conn_type: kUnrollOneToOne unroll_conn_type: kUnrollOneToAll
  }}
}}
"""


@pytest.mark.parametrize("device", ["cpu", "standin"])
def test_the_run_equals_the_copies(tmp_path, monkeypatch, device):
    conf = JOB.format(data=blobs_csv(tmp_path / "d.csv", n=60))
    calls = []
    forward = scale_run.FooScale.forward

    def counted(layer, phase, srcs):
        calls.append(len(layer.data))  # the rows it computes: 24 for the wide one
        forward(layer, phase, srcs)

    monkeypatch.setattr(scale_run.FooScale, "forward", counted)
    params, used = {}, {}
    for runs in ("0", "1"):
        monkeypatch.setenv("SINGA_SEQUENCE_RUNS", runs)
        run = run_job(conf, tmp_path / f"runs{runs}", "--device", device, "--seed", "3")
        params[runs], used[runs] = run.checkpoints[3], [n for n in calls if n == 24]
        calls.clear()
    assert used["0"] == [] and len(used["1"]) >= 3  # the wide one ran (each step), with units
    assert params["0"].keys() == params["1"].keys()
    for name, value in params["0"].items():
        np.testing.assert_allclose(params["1"][name], value, rtol=1e-5, atol=1e-6, err_msg=name)
