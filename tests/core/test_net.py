"""NeuralNet construction: phases, split layers, order, sharing, shapes."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import mlp_conf, write_csv_blobs

from singa_core.jobconf.parse import load_job
from singa_core.layer import kTest, kTrain
from singa_core.plugin_host.host import get_host
from singa_core.running.job import prepare_job

FANOUT = """
  layer { name: "acc" type: kAccuracy srclayers: "ip2" srclayers: "data" include: kTest }
"""


def prepare(tmp_path, **kw):
    data = write_csv_blobs(tmp_path / "d.csv")
    text = mlp_conf(data, tmp_path / "ws", **kw)
    path = tmp_path / "job.conf"
    path.write_text(text)
    return prepare_job(load_job(path), get_host(), seed=3)


def test_train_and_test_nets_order_and_shapes(tmp_path):
    job = prepare(tmp_path, extra=FANOUT)
    train, test = job.nets[kTrain], job.nets[kTest]
    names = [layer.name for layer in train.layers]
    assert names == ["data", "ip1", "tanh", "ip2", "loss"]
    # ip2 feeds loss and acc in the test net: a split layer is inserted
    tnames = [layer.name for layer in test.layers]
    assert "split(ip2)" in tnames
    split = test.by_name["split(ip2)"]
    assert [s.name for s in test.srclayers(test.by_name["loss"])] == ["split(ip2)", "data"]
    assert [s.name for s in test.srclayers(split)] == ["ip2"]
    # the input layer feeds several consumers without a split (one-to-many)
    assert "split(data)" not in tnames
    assert train.by_name["ip1"].shape == (20, 16)
    assert train.by_name["ip2"].shape == (20, 3)
    assert train.by_name["ip1"].params[0].shape == (16, 4)  # (out, in)
    assert train.num_param_values() == 16 * 4 + 16 + 3 * 16 + 3


def test_test_net_shares_values_with_train_net(tmp_path):
    job = prepare(tmp_path)
    train, test = job.nets[kTrain], job.nets[kTest]
    for p in train.params:
        q = test.param_by_name(p.name)
        assert q.value is p.value
        assert q.grad is not p.grad


@pytest.mark.parametrize("spelling", ["w1", "0#w1"])
def test_share_from_both_spellings(tmp_path, spelling):
    extra = f"""
  layer {{
    name: "ip3" type: kInnerProduct srclayers: "data"
    innerproduct_conf {{ num_output: 16 }}
    param {{ name: "w3" share_from: "{spelling}" }}
    param {{ name: "b3" init {{ type: kConstant value: 1 }} }}
  }}
  layer {{ name: "l2" type: kEuclideanLoss srclayers: "ip3" srclayers: "ip1" }}
"""
    job = prepare(tmp_path, extra=extra)
    net = job.nets[kTrain]
    w1, w3 = net.param_by_name("w1"), net.param_by_name("w3")
    assert w3.value is w1.value and w3.owner is w1 and not w3.is_owner
    assert np.all(net.param_by_name("b3").value == 1)


def test_include_exclude(tmp_path):
    extra = (
        'layer { name: "acc" type: kAccuracy srclayers: "ip2" srclayers: "data" exclude: kTrain }'
    )
    job = prepare(tmp_path, extra=extra)
    assert "acc" not in job.nets[kTrain].by_name
    assert "acc" in job.nets[kTest].by_name


def test_same_seed_same_init_different_seed_differs(tmp_path):
    a = prepare(tmp_path).nets[kTrain].param_by_name("w1").value.copy()
    b = prepare(tmp_path).nets[kTrain].param_by_name("w1").value.copy()
    assert np.array_equal(a, b)
    data = write_csv_blobs(tmp_path / "d.csv")
    path = tmp_path / "job2.conf"
    path.write_text(mlp_conf(data, tmp_path / "ws"))
    c = prepare_job(load_job(path), get_host(), seed=4).nets[kTrain].param_by_name("w1").value
    assert not np.array_equal(a, c)


def test_slice_hands_each_consumer_its_part_in_a_net(tmp_path):
    """ip -> kSlice (dim 1) -> two kSTanh -> kConcate: the net connects every consumer to
    its own part, so the concatenation equals stanh(ip) and training runs."""
    from typer.testing import CliRunner

    from singa_core.commands.cli import app
    from singa_core.jobconf.parse import parse_job_text

    data = write_csv_blobs(tmp_path / "blobs.csv")
    text = f"""
name: "sliced"
train_steps: 20
disp_freq: 10
train_one_batch {{ alg: kBP }}
updater {{ type: kSGD learning_rate {{ type: kFixed base_lr: 0.1 }} }}
neuralnet {{
  layer {{ name: "data" type: kCSVInput
           store_conf {{ backend: "textfile" path: "{data}" batchsize: 10 shape: 4 }} }}
  layer {{ name: "ip" type: kInnerProduct srclayers: "data"
           innerproduct_conf {{ num_output: 6 }}
           param {{ name: "w" init {{ type: kGaussian std: 0.5 }} }}
           param {{ name: "b" init {{ type: kConstant value: 0.1 }} }} }}
  layer {{ name: "slice" type: kSlice srclayers: "ip" slice_conf {{ slice_dim: 1 num_slices: 2 }} }}
  layer {{ name: "t1" type: kSTanh srclayers: "slice" }}
  layer {{ name: "t2" type: kSTanh srclayers: "slice" }}
  layer {{ name: "cat" type: kConcate srclayers: "t1" srclayers: "t2"
           concate_conf {{ concate_dim: 1 num_concates: 2 }} }}
  layer {{ name: "loss" type: kSoftmaxLoss srclayers: "cat" srclayers: "data" }}
}}
cluster {{ workspace: "{tmp_path / "ws"}" }}
"""
    conf = tmp_path / "job.conf"
    conf.write_text(text)
    prepared = prepare_job(parse_job_text(text, str(conf)), get_host(), seed=0)
    net = prepared.nets[kTrain]
    for layer in net.layers:
        layer.forward(kTrain, net.srclayers(layer))
    ip, cat = net.by_name["ip"].data, net.by_name["cat"].data
    np.testing.assert_allclose(cat, 1.7159047 * np.tanh(0.66666667 * ip), rtol=1e-5)
    res = CliRunner().invoke(app, ["train", str(conf), "--seed", "0", "-q"])
    assert res.exit_code == 0, res.output
