"""Net unrolling (§4 step 3): the expectations of SINGA 0.3's src/test/test_unrolling.cc,
shared unrolled Params, connection types, and the errors 0.3 did not catch."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import write_csv_blobs

from singa_core.errors import SingaError
from singa_core.jobconf.parse import load_job
from singa_core.layer import kForward, kTrain
from singa_core.netbuilder.specs import LayerSpec
from singa_core.netbuilder.unrolling import unroll
from singa_core.plugin_host.host import get_host
from singa_core.running.job import prepare_job
from singa_core.schema import job_pb2

GRU_PARAMS = ("w_z_hx", "w_r_hx", "w_c_hx", "w_z_hh", "w_r_hh", "w_c_hh")


def gru_lm_conf(data, ws, *, alg="kBPTT", embedding_extra="", gru_conn="") -> str:
    """test_unrolling.cc's GRULanguageModelTrain net (data → embedding → gru → out → loss)."""
    params = "\n".join(
        f'    param {{ name: "{n}" init {{ type: kUniform low: -0.1 high: 0.1 }} }}'
        for n in GRU_PARAMS
    )
    return f"""
name: "unroll"
train_steps: 2
train_one_batch {{ alg: {alg} }}
updater {{ type: kSGD learning_rate {{ type: kFixed base_lr: 0.1 }} }}
neuralnet {{
  layer {{
    name: "data" type: kCSVInput
    store_conf {{ backend: "textfile" path: "{data}" batchsize: 5 shape: 4 }}
  }}
  layer {{
    name: "embedding" type: kDummy srclayers: "data" unroll_len: 3
    unroll_conn_type: kUnrollOneToAll {embedding_extra}
  }}
  layer {{
    name: "gru" type: kGRU srclayers: "embedding" unroll_len: 3 {gru_conn}
    gru_conf {{ dim_hidden: 6 }}
{params}
  }}
  layer {{
    name: "out" type: kInnerProduct srclayers: "gru" unroll_len: 3
    innerproduct_conf {{ num_output: 3 }}
    param {{ name: "w" init {{ type: kUniform low: -0.1 high: 0.1 }} }}
    param {{ name: "b" init {{ type: kConstant value: 0 }} }}
  }}
  layer {{
    name: "loss" type: kSoftmaxLoss srclayers: "out" srclayers: "data" unroll_len: 3
    unroll_conn_type: kUnrollOneToOne unroll_conn_type: kUnrollOneToAll
  }}
}}
cluster {{ workspace: "{ws}" }}
"""


def build(tmp_path, **kw):
    data = write_csv_blobs(tmp_path / "d.csv", n=20)
    path = tmp_path / "job.conf"
    path.write_text(gru_lm_conf(data, tmp_path / "ws", **kw))
    return prepare_job(load_job(path), get_host(), seed=1)


def srcs_of(net, name):
    return [s.name for s in net.srclayers(net.by_name[name])]


def test_gru_language_model_names_sources_and_params(tmp_path):
    net = build(tmp_path).nets[kTrain]
    names = [layer.name for layer in net.layers]
    assert names[0] == "0#data"
    assert set(names) == {
        "0#data",
        *(f"{i}#{n}" for i in range(3) for n in ("embedding", "gru", "out", "loss")),
    }
    for i in range(3):
        assert srcs_of(net, f"{i}#embedding") == ["0#data"]
        assert srcs_of(net, f"{i}#out") == [f"{i}#gru"]
        assert srcs_of(net, f"{i}#loss") == [f"{i}#out", "0#data"]
    assert srcs_of(net, "0#gru") == ["0#embedding"]
    assert srcs_of(net, "1#gru") == ["1#embedding", "0#gru"]
    assert srcs_of(net, "2#gru") == ["2#embedding", "1#gru"]
    # every layer comes after its sources
    pos = {n: k for k, n in enumerate(names)}
    for layer in net.layers:
        assert all(pos[s] < pos[layer.name] for s in srcs_of(net, layer.name))

    for i in range(3):
        gru = net.by_name[f"{i}#gru"]
        assert [p.name for p in gru.params] == [f"{i}#{n}" for n in GRU_PARAMS]
        out = net.by_name[f"{i}#out"]
        assert [p.name for p in out.params] == [f"{i}#w", f"{i}#b"]
    first = {p.name: p for p in net.params if p.name.startswith("0#")}
    for p in net.params:
        if p.name.startswith("0#"):
            assert p.is_owner and p.grad_owner is p
            assert p.proto.share_from == ""
        else:  # i#x, i ≥ 1: value and gradient of 0#x
            base = first["0#" + p.name.split("#", 1)[1]]
            assert p.value is base.value and p.grad is base.grad
            assert p.owner is base and p.grad_owner is base
    # each shared gradient is sent once per step
    assert set(net.contributions().values()) == {1}
    assert len(net.owner_params) == len(GRU_PARAMS) + 2


def unrolled_edges(layers):
    """Run the unroll transform alone on (name, unroll_len, [(src, conn, shift)], recurrent)."""
    specs, recurrent = [], set()
    for name, n, srcs, rec in layers:
        conf = job_pb2.LayerProto(name=name, type=job_pb2.kDummy, unroll_len=n)
        for _, conn, shift in srcs:
            conf.unroll_conn_type.append(conn)
            conf.shift.append(shift)
        specs.append(LayerSpec(conf, None, [s for s, _, _ in srcs]))
        if rec:
            recurrent.add(name)

    def get_plugin(kind, name):
        return type("L", (), {"recurrent": False})

    out = unroll(specs, kTrain, None, get_plugin, lambda path=None: None)
    return {s.conf.name: s.srcs for s in out}


def test_shift_first_to_last_and_customized_edges():
    one, all_, f2l, custom = (
        job_pb2.kUnrollOneToOne,
        job_pb2.kUnrollOneToAll,
        job_pb2.kUnrollFirstToLast,
        job_pb2.kUnrollCustomized,
    )
    edges = unrolled_edges(
        [
            ("x", 3, [], False),
            ("shifted", 3, [("x", one, 1)], False),
            ("f2l", 2, [("x", f2l, 0)], False),
            ("both", 2, [("x", all_, 0), ("f2l", one, 0)], False),
            ("none", 2, [("x", custom, 0)], False),
        ]
    )
    assert edges["0#shifted"] == [] and edges["1#shifted"] == ["0#x"]
    assert edges["2#shifted"] == ["1#x"]
    assert edges["0#f2l"] == ["2#x"] and edges["1#f2l"] == []
    assert edges["1#both"] == ["0#x", "1#x", "2#x", "1#f2l"]
    assert edges["0#none"] == [] and edges["1#none"] == []


def test_a_net_without_unrolling_keeps_its_names(tmp_path):
    net = build(tmp_path).nets[kTrain]
    assert "0#data" in net.by_name
    from conftest import mlp_conf

    data = write_csv_blobs(tmp_path / "m.csv")
    path = tmp_path / "mlp.conf"
    path.write_text(mlp_conf(data, tmp_path / "ws2"))
    plain = prepare_job(load_job(path), get_host(), seed=1).nets[kTrain]
    assert [layer.name for layer in plain.layers][0] == "data"


def test_bp_refuses_an_unrolled_net(tmp_path):
    with pytest.raises(SingaError) as err:
        build(tmp_path, alg="kBP")
    assert "kBPTT" in err.value.help
    assert "job.conf" in str(err.value.where)


def test_one_to_one_to_a_shorter_source_is_an_error(tmp_path):
    data = write_csv_blobs(tmp_path / "d.csv", n=20)
    text = gru_lm_conf(data, tmp_path / "ws").replace(
        'srclayers: "data" unroll_len: 3\n    unroll_conn_type: kUnrollOneToAll',
        'srclayers: "data" unroll_len: 3',
    )
    path = tmp_path / "job.conf"
    path.write_text(text)
    with pytest.raises(SingaError) as err:
        prepare_job(load_job(path), get_host(), seed=1)
    msg = str(err.value)
    assert "'embedding'" in msg and "'data'" in msg and "kUnrollOneToAll" in err.value.help
    assert f"{path}:" in str(err.value.where)


def test_too_many_conn_types_is_an_error(tmp_path):
    with pytest.raises(SingaError) as err:
        build(tmp_path, embedding_extra="unroll_conn_type: kUnrollOneToAll")
    assert "2 unroll_conn_type entries but 1 source" in str(err.value)


class RecordingStub:
    def __init__(self):
        self.collected, self.updated = [], []

    def collect(self, p):
        self.collected.append(p.name)

    def update(self, step, p):
        self.updated.append((p.name, p.grad.astype(np.float64).copy()))


def total_loss(net) -> float:
    """Forward every layer but the data layer (keeps the batch) and sum the copies' losses."""
    for layer in net.layers[1:]:
        layer.forward(kTrain | kForward, net.srclayers(layer))
    return float(sum(layer.loss for layer in net.layers if getattr(layer, "is_loss", False)))


def test_bptt_gradient_is_the_gradient_of_the_summed_loss(tmp_path):
    """kBPTT accumulates every copy's share (kAggGrad) and sends each Param once; the sent
    gradient equals central differences of Σ_i loss_i w.r.t. the shared value."""
    job = build(tmp_path)
    net, worker = job.nets[kTrain], job.make_worker()
    for p in net.owner_params:  # float64 arithmetic is not available; use larger values
        p.value *= 20
    stub = RecordingStub()
    worker.train_one_batch(0, net, stub)
    sent = dict(stub.updated)
    assert sorted(sent) == sorted(p.name for p in net.owner_params)
    assert len(stub.updated) == len(net.owner_params)
    rng = np.random.default_rng(0)
    eps = 1e-2
    for name in ("0#w_z_hh", "0#w_c_hh", "0#w_r_hx", "0#w", "0#b"):
        p = net.param_by_name(name)
        flat = p.value.reshape(-1)
        for k in rng.choice(flat.size, size=min(4, flat.size), replace=False):
            old = flat[k]
            flat[k] = old + eps
            up = total_loss(net)
            flat[k] = old - eps
            down = total_loss(net)
            flat[k] = old
            numeric = (up - down) / (2 * eps)
            analytic = sent[name].reshape(-1)[k]
            assert analytic == pytest.approx(numeric, rel=2e-2, abs=2e-4), (name, k)


def test_bptt_trains_through_the_cli(tmp_path):
    from conftest import run_singa

    data = write_csv_blobs(tmp_path / "d.csv", n=20)
    path = tmp_path / "job.conf"
    path.write_text(
        gru_lm_conf(data, tmp_path / "ws").replace(
            "train_steps: 2", "train_steps: 30\ndisp_freq: 10"
        )
    )
    proc = run_singa("train", str(path), "--seed", "1")
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout + proc.stderr
    # the unrolled copies report as one layer (averaged), not as 0#loss/1#loss/2#loss
    lines = [ln for ln in text.splitlines() if ln.startswith("Train step-")]
    assert len(lines) == 3 and all("#" not in ln for ln in lines)
    first, last = (float(ln.split("loss = ")[1].split(",")[0]) for ln in (lines[0], lines[-1]))
    assert last < first
