"""Partitioning a net across the workers of a group (§4 steps 6-7, 9c): connection layers,
replicas, bridges, param sharing, batch stripes, and equivalence with the unpartitioned net
(the in-process engine runs every partition of a group in one process)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import mlp_conf, run_singa, write_csv_blobs

from singa_core.errors import SingaError
from singa_core.jobconf.parse import load_job
from singa_core.layer import kTrain
from singa_core.plugin_host.host import get_host
from singa_core.running import checkpoint as ck
from singa_core.running.job import prepare_job

GROUP = ["-o", "cluster.nworkers_per_group=2", "-o", "cluster.nworkers_per_procs=2"]
NO_SKIP = ["-o", "neuralnet.layer[0].store_conf.random_skip=0"]


def conf_file(tmp_path, name="job.conf", **kw):
    data = write_csv_blobs(tmp_path / "d.csv", n=240)
    path = tmp_path / name
    path.write_text(mlp_conf(data, tmp_path / f"ws-{name}", **kw))
    return path


def build(path, overrides):
    return prepare_job(load_job(path, overrides), get_host(), seed=2).nets[kTrain]


def srcs(net, name):
    return [s.name for s in net.srclayers(net.by_name[name])]


def test_model_partition_inserts_connections_and_bridges(tmp_path):
    path = conf_file(tmp_path)
    net = build(
        path, ["cluster.nworkers_per_group=2", "neuralnet.layer[1].partition_dim=1", "test_steps=0"]
    )
    names = {layer.name for layer in net.layers}
    # data (dim 0) -> ip1 (dim 1, needs its whole source): split + concate across partitions
    for j in (0, 1):
        assert srcs(net, f"ip1@{j}") == [f"concate(split(data))@{j}"]
        assert net.by_name[f"ip1@{j}"].shape == (20, 8)  # all 20 rows, half the features
    # tanh (dim 0) after ip1 (dim 1): slice along the batch, gather along the features
    # (a slice hands part j to the layers bound for partition j)
    assert srcs(net, "concate(slice(ip1))@0") == [
        "slice(ip1)@0[0]",
        "bridge_dst(slice(ip1)@1->concate(slice(ip1))@0)",
    ]
    assert srcs(net, "concate(slice(ip1))@1") == [
        "bridge_dst(slice(ip1)@0->concate(slice(ip1))@1)",
        "slice(ip1)@1[1]",
    ]
    assert srcs(net, "bridge_src(slice(ip1)@1->concate(slice(ip1))@0)") == ["slice(ip1)@1[0]"]
    assert srcs(net, "bridge_dst(slice(ip1)@1->concate(slice(ip1))@0)") == [
        "bridge_src(slice(ip1)@1->concate(slice(ip1))@0)"
    ]
    assert srcs(net, "concate(split(data))@0") == [
        "split(data)@0",
        "bridge_dst(split(data)@1->concate(split(data))@0)",
    ]
    assert "bridge_src(split(data)@0->concate(split(data))@1)" in names
    # every cross-partition edge is a bridge
    for layer in net.layers:
        for name in net.specs[layer.name].srcs:
            src = net.by_name[name]
            if src.ctx.partition_id != layer.ctx.partition_id:
                assert layer.type_names[0] == "kBridgeDst", (name, layer.name)
    # params: dim-1 replicas own halves; dim-0 replicas share replica 0's values
    w1, w1b = net.param_by_name("w1"), net.param_by_name("w1@1")
    assert w1.shape == w1b.shape == (8, 4) and w1.is_owner and w1b.is_owner
    w2, w2b = net.param_by_name("w2"), net.param_by_name("w2@1")
    assert w2b.value is w2.value and w2b.grad is not w2.grad and w2b.replica
    assert net.contributions()[w2.id] == 2 and net.contributions()[w1.id] == 1
    # a worker's view: only its layers and params, ids of the whole net
    view = net.partition_view(1)
    assert all(layer.conf.partition_id == 1 for layer in view.layers)
    assert {p.name for p in view.params} >= {"w1@1", "w2@1"}
    assert all(p is net.params[p.id] for p in view.params)


def test_shapes_per_partition(tmp_path):
    path = conf_file(tmp_path)
    net = build(
        path, ["cluster.nworkers_per_group=2", "neuralnet.layer[1].partition_dim=1", "test_steps=0"]
    )
    assert net.by_name["data@0"].shape == (10, 4)  # the batch of 20 split in two
    assert net.by_name["concate(split(data))@1"].shape == (20, 4)  # ip1 sees all 20 rows
    assert net.by_name["ip1@1"].shape == (20, 8)  # and half of the 16 features
    assert net.by_name["concate(slice(ip1))@0"].shape == (10, 16)  # back to dim 0
    assert net.by_name["tanh@0"].shape == (10, 16)


def test_indivisible_features_are_a_config_error(tmp_path):
    path = conf_file(tmp_path)  # ip2 has 3 outputs
    with pytest.raises(SingaError) as err:
        build(
            path,
            ["cluster.nworkers_per_group=2", "neuralnet.layer[3].partition_dim=1", "test_steps=0"],
        )
    assert "not divisible" in str(err.value)
    # partition_dim came from -o, so the error points at that override
    assert "-o neuralnet.layer[3].partition_dim=1" in str(err.value.where)


def test_connection_layer_nets_of_test_neuralnet_build(tmp_path):
    """test_neuralnet.cc's K=2 nets: one input feeding two neurons (split), a direct
    connection, and slice/concate to an output partitioned on dimension 1."""
    data = write_csv_blobs(tmp_path / "d.csv", n=40)
    extra = """
  layer { name: "ip3" type: kInnerProduct srclayers: "data" partition_dim: 1
          innerproduct_conf { num_output: 6 }
          param { name: "w3" init { type: kUniform low: -0.1 high: 0.1 } }
          param { name: "b3" init { type: kConstant value: 0 } } }
  layer { name: "relu" type: kReLU srclayers: "ip3" partition_dim: 1 }
"""
    path = tmp_path / "j.conf"
    path.write_text(mlp_conf(data, tmp_path / "ws", extra=extra))
    net = build(path, ["cluster.nworkers_per_group=2", "test_steps=0"])
    assert srcs(net, "relu@1") == ["ip3@1"]  # same dimension: direct
    assert net.by_name["relu@0"].shape == (20, 3)


def final_params(ws, step):
    return {r.name: r.value for r in ck.read_params(ws / "checkpoint" / f"step{step}-worker0")}


def train(path, *args):
    proc = run_singa("train", str(path), "--seed", "4", *NO_SKIP, *args)
    assert proc.returncode == 0, proc.stderr
    return proc


@pytest.mark.slow
def test_data_parallel_group_equals_one_worker_on_the_global_batch(tmp_path):
    one = conf_file(tmp_path, "one.conf", steps=12, momentum=0.9)
    two = conf_file(tmp_path, "two.conf", steps=12, momentum=0.9)
    train(one)
    proc = train(two, *GROUP)
    assert "workers 0-1" in run_singa("train", str(two), "--dry-run", *GROUP).stdout
    a, b = final_params(tmp_path / "ws-one.conf", 12), final_params(tmp_path / "ws-two.conf", 12)
    assert sorted(a) == sorted(b)
    for name in a:
        np.testing.assert_allclose(b[name], a[name], rtol=2e-5, atol=2e-6, err_msg=name)
    assert "Train step-0" in proc.stdout + proc.stderr


@pytest.mark.slow
def test_model_partition_equals_the_unpartitioned_net(tmp_path):
    """ip1 partitioned on its outputs across 2 workers, started from the unpartitioned
    net's initial values (its rows split between w1 and w1@1): the same training."""
    one = conf_file(tmp_path, "one.conf", steps=10)
    two = conf_file(tmp_path, "two.conf", steps=10)
    train(one, "-o", "checkpoint_freq=10")
    init = final_params(tmp_path / "ws-one.conf", 0)
    records = []
    for name, value in init.items():
        plain = name.removeprefix("0#")
        if plain in ("w1", "b1"):
            halves = np.split(value, 2, axis=0)
            records.append(ck.ParamRecord(name, 0, halves[0]))
            records.append(ck.ParamRecord(name + "@1", 0, halves[1]))
        else:
            records.append(ck.ParamRecord(name, 0, value))
    start = tmp_path / "split-init"
    start.write_bytes(ck.encode_params(records))
    model = ["-o", "neuralnet.layer[1].partition_dim=1", "-o", "test_steps=0"]
    train(two, *GROUP, *model, "-o", f"checkpoint_path={start}")
    a, b = final_params(tmp_path / "ws-one.conf", 10), final_params(tmp_path / "ws-two.conf", 10)
    for name in ("w1", "b1"):
        whole = np.concatenate([b["0#" + name], b["0#" + name + "@1"]], axis=0)
        np.testing.assert_allclose(whole, a["0#" + name], rtol=2e-5, atol=2e-6, err_msg=name)
    for name in ("w2", "b2"):
        np.testing.assert_allclose(b["0#" + name], a["0#" + name], rtol=2e-5, atol=2e-6)


def test_model_partitioned_test_net_is_a_clear_error(tmp_path):
    path = conf_file(tmp_path)
    proc = run_singa(
        "train", str(path), *GROUP, "-o", "neuralnet.layer[1].partition_dim=1", "--dry-run"
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "partitioned on dimension 1" in proc.stderr and "test_steps: 0" in proc.stderr


def test_per_partition_batchsize_lists_read_their_stripes(tmp_path):
    """store_conf.batchsize [12, 8] with 2 partitions (SINGA-131's manual split): partition
    0 reads 12 records, partition 1 the next 8, then both skip ahead to the next group batch."""
    from singa_core.layer import kForward

    path = conf_file(tmp_path)
    path.write_text(path.read_text().replace("batchsize: 20", "batchsize: 12 batchsize: 8"))
    net = build(
        path,
        [
            "cluster.nworkers_per_group=2",
            "neuralnet.layer[0].store_conf.random_skip=0",
            "test_steps=0",
        ],
    )
    d0, d1 = net.by_name["data@0"], net.by_name["data@1"]
    assert d0.shape == (12, 4) and d1.shape == (8, 4)
    rows = np.loadtxt(tmp_path / "d.csv", delimiter=",", dtype=np.float32)[:, 1:]
    for batch in range(2):
        for layer in (d0, d1):
            layer.forward(kTrain | kForward, [])
        start = 20 * batch
        np.testing.assert_allclose(d0.data, rows[start : start + 12], rtol=1e-5)
        np.testing.assert_allclose(d1.data, rows[start + 12 : start + 20], rtol=1e-5)
