"""Non-learnable Params (``Param.learnable = False``, e.g. kBM's running statistics): the
server never applies the updater to them but counts their versions; a net with kBM trains,
checkpoints and resumes them."""

from __future__ import annotations

import json

import numpy as np
from conftest import mlp_conf, write_csv_blobs
from singa_builtins.lr_changes.fixed import FixedLR
from singa_builtins.updaters.sgd import SGDUpdater
from typer.testing import CliRunner

from singa_core.commands.cli import app
from singa_core.param import Param
from singa_core.running import checkpoint as ck
from singa_core.schema import job_pb2
from singa_core.stub import ParamShard

runner = CliRunner()

BN = """
  layer {
    name: "bn" type: kBM srclayers: "ip1"
    param { name: "bn_scale" init { type: kConstant value: 1 } }
    param { name: "bn_bias" init { type: kConstant value: 0 } }
    param { name: "bn_mean" init { type: kConstant value: 0 } }
    param { name: "bn_inv_std" init { type: kConstant value: 0 } }
  }
"""
RUNNING = ("0#bn_mean", "0#bn_inv_std")


def bn_job(tmp_path, **kw):
    """conftest's small MLP with a kBM layer between ip1 and the tanh."""
    data = write_csv_blobs(tmp_path / "blobs.csv")
    ws = tmp_path / "ws"
    text = mlp_conf(data, ws, extra=BN, **kw)
    old = 'name: "tanh" type: kSTanh srclayers: "ip1"'
    assert old in text
    conf = tmp_path / "job.conf"
    conf.write_text(text.replace(old, 'name: "tanh" type: kSTanh srclayers: "bn"'))
    return conf, ws


def singa(*args):
    res = runner.invoke(app, [str(a) for a in args])
    if res.exit_code != 0:
        raise AssertionError(f"exit {res.exit_code}\n{res.output}\n{res.exception!r}")
    return res


def params_of(path):
    return {r.name: r for r in ck.read_params(path)}


def test_params_are_learnable_by_default():
    assert Param(job_pb2.ParamProto(name="w"), (2, 3)).learnable


def test_shard_never_updates_non_learnable_values():
    conf = job_pb2.UpdaterProto(type=job_pb2.kSGD, momentum=0.9, weight_decay=0.5)
    updater = SGDUpdater(conf, FixedLR(job_pb2.LRGenProto(type=job_pb2.kFixed, base_lr=0.1)))
    shard = ParamShard(updater)
    w = np.ones(3, np.float32)
    r = np.full(3, 2.0, np.float32)
    shard.put(0, w, 0, lr_scale=1.0, wd_scale=1.0)
    shard.put(1, r, 5, lr_scale=1.0, wd_scale=1.0, num_total=2, learnable=False)
    for step in range(3):
        assert shard.update(0, step, np.full(3, 1.0, np.float32)) == step + 1
        assert shard.update(1, step, np.full(3, 1.0, np.float32)) is None  # 1 of 2
        assert shard.update(1, step, np.full(3, 1.0, np.float32)) == 6 + step
    assert not np.allclose(w, 1.0)  # the learnable one moved (gradient, momentum, decay)
    np.testing.assert_array_equal(r, 2.0)  # no gradient step, weight decay or momentum
    assert shard.entries[1].state == {}
    assert list(shard.state_arrays({0: "0#w", 1: "0#r"})) == ["0#w::history"]


def test_running_statistics_are_only_written_by_the_layer(tmp_path):
    from singa_core.jobconf.parse import load_job
    from singa_core.plugin_host.host import get_host
    from singa_core.running.job import prepare_job
    from singa_core.running.reporting import Reporter

    conf, ws = bn_job(tmp_path)
    host = get_host()
    prepared = prepare_job(load_job(conf, [f"cluster.workspace={ws}"]), host, seed=3)
    engine = host.get("engine", "inprocess")(prepared, Reporter(quiet=True))
    engine._init_params()
    stub = engine._loop().stub
    net = engine.train_net
    bn = next(layer for layer in net.layers if layer.name == "bn")
    running = [p for p in net.params if not p.learnable]
    assert [p.name for p in running] == ["bn_mean", "bn_inv_std"]
    written = {}
    forward = bn.forward

    def spy(phase, srcs):  # what the layer wrote into its running statistics
        forward(phase, srcs)
        written.update({p.name: p.value.copy() for p in running})

    bn.forward = spy
    w1 = next(p for p in net.params if p.name == "w1")
    for step in range(5):
        before = w1.value.copy()
        engine.worker.train_one_batch(step, net, stub)
        assert not np.array_equal(before, w1.value)
        for p in running:
            # momentum 0.9 and weight decay 1e-4 would have moved them after the forward
            np.testing.assert_array_equal(p.value, written[p.name])
            assert (p.value != 0).all()
        assert {p.version for p in net.params} == {step + 1}


def test_bm_net_trains_checkpoints_and_resumes(tmp_path):
    conf, ws = bn_job(tmp_path, steps=60, checkpoint_freq=20)
    out = singa("train", conf, "--seed", "7").output
    # before training the running statistics are unset (inverse std 0): y = bias, as in 0.3
    assert "Test step-0, loss = 1.098612" in out
    lines = [json.loads(x) for x in (ws / "metrics.jsonl").read_text().splitlines()]
    tests = [x for x in lines if x.get("phase") == "test"]
    # tested at 30 and at the end; with running statistics
    assert [t["step"] for t in tests[-2:]] == [30, 60] and tests[-1]["accuracy"] > 0.9
    full = params_of(ws / "checkpoint" / "step60-worker0")
    for name in RUNNING:
        assert full[name].version == 60 and (full[name].value != 0).all()
    state = ck.read_state(str(ws / "checkpoint" / "step60-worker0") + ck.STATE_SUFFIX)
    assert not any(k.startswith(RUNNING) for k in state.arrays)  # no updater history

    ws2 = tmp_path / "resumed"
    singa("train", conf, "--seed", "7", "--workspace", ws2, "-o", "train_steps=37")
    singa("train", conf, "--resume", "--workspace", ws2)
    resumed = params_of(ws2 / "checkpoint" / "step60-worker0")
    assert set(resumed) == set(full)
    for name, rec in full.items():
        np.testing.assert_array_equal(rec.value, resumed[name].value, err_msg=name)
        assert rec.version == resumed[name].version
