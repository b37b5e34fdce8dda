"""kBP: SINGA's order — forward with each layer's Params collected first, backward in
reverse with each layer's Params handed to the servers right after its backward."""

from __future__ import annotations

import numpy as np
from conftest import mlp_conf, write_csv_blobs

from singa_core.jobconf.parse import load_job
from singa_core.layer import kTest
from singa_core.plugin_host.host import get_host
from singa_core.running.job import prepare_job
from singa_core.testing import RecordingStub, expected_bp_order


def prepared(tmp_path):
    data = write_csv_blobs(tmp_path / "d.csv")
    path = tmp_path / "job.conf"
    path.write_text(mlp_conf(data, tmp_path / "ws"))
    return prepare_job(load_job(path), get_host(), seed=0)


def test_train_one_batch_order(tmp_path, monkeypatch):
    job = prepared(tmp_path)
    net = job.nets[1]
    worker = job.make_worker()
    order = []
    for layer in net.layers:
        for name in ("forward", "backward"):
            fn = getattr(layer, name)

            def wrapped(*a, _fn=fn, _n=name, _l=layer.name):
                order.append((_n, _l))
                return _fn(*a)

            monkeypatch.setattr(layer, name, wrapped)
    stub = RecordingStub()
    original_collect, original_update = stub.collect, stub.update
    monkeypatch.setattr(
        stub, "collect", lambda p: (order.append(("collect", p.name)), original_collect(p))
    )
    monkeypatch.setattr(
        stub, "update", lambda s, p: (order.append(("update", p.name)), original_update(s, p))
    )
    worker.train_one_batch(0, net, stub)
    assert order == expected_bp_order(net.layers)
    # every gradient handed over is a real (non-zero) gradient
    assert all(e[2] for e in stub.events if e[0] == "update")


def test_test_one_batch_is_forward_only(tmp_path):
    job = prepared(tmp_path)
    net = job.nets[kTest]
    before = {p.name: p.value.copy() for p in net.params}
    job.make_worker().test_one_batch(kTest, net)
    metrics = net.by_name["loss"].pop_metrics()
    assert set(metrics) == {"loss", "accuracy"}
    for p in net.params:
        np.testing.assert_array_equal(p.value, before[p.name])
