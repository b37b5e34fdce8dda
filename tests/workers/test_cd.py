"""kCD: SINGA's phase order (positive over all layers, cd_k negative Gibbs steps over the RBM
layers, gradient phase with updates), test batches reporting the reconstruction error, and a
small RBM trained through the CLI whose reconstruction error falls."""

from __future__ import annotations

import json

import numpy as np
from conftest import write_csv_blobs
from typer.testing import CliRunner

from singa_core.commands.cli import app
from singa_core.jobconf.parse import load_job
from singa_core.layer import kNegative, kPositive, kTest, kTrain
from singa_core.plugin_host.host import get_host
from singa_core.running.job import prepare_job
from singa_core.testing import RecordingStub

DIM = 12


def unit_blobs(path, n=300):
    """CSV blobs with every feature min-max scaled to [0, 1]."""
    raw = write_csv_blobs(path.with_suffix(".raw"), n=n, dim=DIM, classes=3)
    rows = np.loadtxt(raw, delimiter=",")
    x = rows[:, 1:]
    x = (x - x.min(0)) / (x.max(0) - x.min(0))
    with open(path, "w") as f:
        for lab, row in zip(rows[:, 0].astype(int), x, strict=True):
            f.write(",".join([str(lab)] + [f"{v:.5f}" for v in row]) + "\n")
    return path


def rbm_conf(data, ws, *, steps=400, cd_k=1, vis_srcs='srclayers: "data" srclayers: "hid"'):
    return f"""
name: "rbm"
train_steps: {steps}
disp_freq: 50
test_steps: 5
test_freq: 100
train_one_batch {{ alg: kCD cd_conf {{ cd_k: {cd_k} }} }}
updater {{
  type: kSGD
  momentum: 0.8
  learning_rate {{ type: kFixed base_lr: 0.1 }}
}}
neuralnet {{
  layer {{
    name: "data" type: kCSVInput
    store_conf {{ backend: "textfile" path: "{data}" batchsize: 20 shape: {DIM} }}
  }}
  layer {{
    name: "vis" type: kRBMVis {vis_srcs}
    rbm_conf {{ hdim: 8 }}
    param {{ name: "w1" init {{ type: kGaussian std: 0.1 }} }}
    param {{ name: "b11" init {{ type: kConstant value: 0 }} }}
  }}
  layer {{
    name: "hid" type: kRBMHid srclayers: "vis"
    rbm_conf {{ hdim: 8 }}
    param {{ name: "w1_" share_from: "w1" }}
    param {{ name: "b12" init {{ type: kConstant value: 0 }} }}
  }}
}}
cluster {{ workspace: "{ws}" }}
"""


def prepared(tmp_path, **kw):
    path = tmp_path / "job.conf"
    path.write_text(rbm_conf(unit_blobs(tmp_path / "d.csv"), tmp_path / "ws", **kw))
    return prepare_job(load_job(path), get_host(), seed=0)


def record_calls(net, order, monkeypatch):
    for layer in net.layers:
        for name in ("forward", "backward"):
            fn = getattr(layer, name)

            def wrapped(flag, srcs, _fn=fn, _n=name, _l=layer.name):
                order.append((_n, _l, flag))
                return _fn(flag, srcs)

            monkeypatch.setattr(layer, name, wrapped)


def test_train_one_batch_order(tmp_path, monkeypatch):
    job = prepared(tmp_path, cd_k=3)
    net = job.nets[kTrain]
    assert [layer.name for layer in net.layers] == ["data", "vis", "hid"]
    order = []
    record_calls(net, order, monkeypatch)
    stub = RecordingStub()
    stub.events = order  # the stub's calls and the layers' calls in one list
    job.make_worker().train_one_batch(0, net, stub)
    order = [e[:2] if e[0] == "update" else e for e in order]
    expected = []
    for layer in net.layers:
        expected += [("collect", p.name) for p in layer.params]
        expected.append(("forward", layer.name, kPositive))
    expected += [("forward", "vis", kNegative | kTest), ("forward", "hid", kNegative | kTest)]
    expected += [("forward", "vis", kNegative), ("forward", "hid", kNegative)] * 2
    expected += [("backward", "vis", kTrain), ("backward", "hid", kTrain)]
    # after both backward passes: the zero contribution (hid's shared weight) first, so
    # the visible layer's gradient of w1 arrives last and is used as it is (not copied)
    expected += [("update", "w1_"), ("update", "w1"), ("update", "b11"), ("update", "b12")]
    assert order == expected
    vis, hid = net.by_name["vis"], net.by_name["hid"]
    assert hid.params[0].value is vis.params[0].value  # share_from "w1"
    assert np.abs(vis.params[0].grad).sum() > 0
    np.testing.assert_array_equal(hid.params[0].grad, 0)


def test_test_one_batch_reports_the_reconstruction_error(tmp_path, monkeypatch):
    job = prepared(tmp_path)
    net = job.nets[kTest]
    before = {p.name: p.value.copy() for p in net.params}
    order = []
    record_calls(net, order, monkeypatch)
    job.make_worker().test_one_batch(kTest, net)
    assert order == [
        ("forward", "data", kTest | kPositive),
        ("forward", "vis", kTest | kPositive),
        ("forward", "hid", kTest | kPositive),
        ("forward", "vis", kNegative | kTest),
    ]
    assert set(net.by_name["vis"].pop_metrics()) == {"Squared Error"}
    for p in net.params:
        np.testing.assert_array_equal(p.value, before[p.name])


def test_rbm_training_lowers_the_reconstruction_error(tmp_path):
    path = tmp_path / "job.conf"
    ws = tmp_path / "ws"
    path.write_text(rbm_conf(unit_blobs(tmp_path / "d.csv"), ws))
    res = CliRunner().invoke(app, ["train", str(path), "--seed", "1"])
    assert res.exit_code == 0, f"{res.output}\n{res.exception!r}"
    assert "Squared Error = " in res.output
    lines = [json.loads(x) for x in (ws / "metrics.jsonl").read_text().splitlines()]
    tests = [x for x in lines if x.get("phase") == "test"]
    assert tests[0]["step"] == 0 and len(tests) >= 3
    assert tests[-1]["Squared Error"] < 0.5 * tests[0]["Squared Error"]


def test_the_0_3_form_with_the_hidden_layer_as_second_source_builds(tmp_path):
    path = tmp_path / "job.conf"
    srcs = 'srclayers: "data" srclayers: "hid"'
    path.write_text(rbm_conf(unit_blobs(tmp_path / "d.csv"), tmp_path / "ws", vis_srcs=srcs))
    job = prepare_job(load_job(path), get_host(), seed=0)
    net = job.nets[kTrain]
    assert [s.name for s in net.srclayers(net.by_name["vis"])] == ["data", "hid"]
