"""The wide units of unrolled copies (singa_core.sequences): a row-independent layer, built-in
or a plugin's, runs its copies as one instance of its own class with no run code; its
random draws are the copies'; a device copy moves what its consumer read; and a unit's
gradient mode is the one its contract states."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from conftest import write_csv_blobs
from test_sequence_runs import assert_same, engine_for, job_text, snapshot, unit_kinds

import singa_core.plugin_host.host as plugin_host
from singa_core.cuda import EmulatedRuntime
from singa_core.device import to_host
from singa_core.hookspecs import hookimpl
from singa_core.layer import NeuronLayer, kAggGrad, kBackward, kTrain
from singa_core.plugin_host.registry import Provider
from singa_core.running.training import pop_net_metrics
from singa_core.sequences import RowIndependent

DEVICES = [
    "cpu",
    "standin",
    pytest.param(
        "standin:cuda",
        marks=pytest.mark.skipif(EmulatedRuntime.compiler() is None, reason="no C++ compiler"),
    ),
]


class RowScale(RowIndependent, NeuronLayer):
    """A plugin's layer: ``y = x ⊙ s`` per feature (a learned ``s``), plus noise ``σ·u`` drawn
    in training, and a metric (the mean of ``y``). No run code."""

    placement = "device"

    def setup(self, srcs):
        self.expect_srcs(srcs)
        self.alloc_like(srcs[0].data)
        self.scale = self.create_param(0, (srcs[0].data.shape[1],), "scale")
        self.noise = self.xp.empty(self.data.shape, dtype=np.float32)

    def forward(self, phase, srcs):
        np.multiply(srcs[0].data, self.scale.value, out=self.data)
        if phase & kTrain:
            self.draw(self.noise)
            self.data += 0.01 * self.noise
        self.add_metric("mean", float(to_host(self.data).mean()))

    def backward(self, phase, srcs):
        x, g = srcs[0].data, self.grad
        ds = (g * x).sum(axis=0)
        if phase & kAggGrad:
            self.scale.grad += ds
        else:
            self.scale.grad[...] = ds
        gx = srcs[0].grad_for(self)
        if gx is not None:
            np.multiply(g, self.scale.value, out=gx)


@hookimpl
def singa_register_layers(register):
    register("kRowScale", RowScale)


@pytest.fixture
def with_row_scale(monkeypatch):
    host = plugin_host.PluginHost()
    host.load_entry_points()
    plugin = SimpleNamespace(singa_register_layers=singa_register_layers)
    host.add_plugin(plugin, name="rowscale", provider=Provider("rowscale", "tests", "0"))
    monkeypatch.setattr(plugin_host, "_default_host", host)


@pytest.mark.parametrize("device", DEVICES)
def test_a_plugins_row_independent_layer_runs_wide_with_no_run_code(
    tmp_path, monkeypatch, with_row_scale, device
):
    data = write_csv_blobs(tmp_path / "d.csv", n=60)
    results = {}
    for runs in (False, True):
        text = job_text(data, tmp_path / f"ws{runs}", act="type: kSTanh")
        text = text.replace('srclayers: "gru" type: kSTanh', 'srclayers: "gru" user_type: '
                            '"kRowScale" param { name: "s" init { type: kUniform low: 0.5 '
                            'high: 1.5 } }')  # fmt: skip
        net, worker, stub = engine_for(tmp_path, monkeypatch, runs=runs, device=device,
                                       tag=device, text=text)  # fmt: skip
        units = net.units()
        if runs:
            (wide,) = [u for u in units if type(u) is RowScale]
            copies = [net.by_name[f"{i}#act"] for i in range(4)]
            assert wide.copies == copies and wide.name == "0#act…3#act"
            assert wide.data.shape == (4 * 6, 7) and wide.params == copies[0].params
            assert {"GRURun", "InnerProductLayer", "SoftmaxLossLayer"} <= unit_kinds(units)
        else:
            assert units == net.layers
        for step in range(3):
            worker.train_one_batch(step, net, stub)
            stub.flush()
        results[runs] = (snapshot(net), pop_net_metrics(net))
    (a, am), (b, bm) = results[False], results[True]
    assert_same(a, b, 2e-5)
    assert am.keys() == bm.keys() and "mean" in am  # the copies' average; copy 0 the wide's
    for k in am:
        assert am[k] == pytest.approx(bm[k], rel=1e-5), k


def test_a_wide_dropout_draws_what_its_copies_would(tmp_path, monkeypatch):
    """Given the same generators' states, the wide kDropout's mask over T·B rows is the
    copies' masks, bit for bit, in time order."""
    masks = {}
    for runs in (False, True):
        net, worker, stub = engine_for(
            tmp_path, monkeypatch, runs=runs, tag="drop",
            act="type: kDropout dropout_conf { dropout_ratio: 0.4 }",
        )  # fmt: skip
        worker.train_one_batch(0, net, stub)
        if runs:
            (wide,) = [u for u in net.units() if type(u).__name__ == "DropoutLayer"]
            masks[runs] = to_host(wide.mask)
        else:
            masks[runs] = np.concatenate([to_host(net.by_name[f"{i}#act"].mask) for i in range(4)])
    np.testing.assert_array_equal(masks[False], masks[True])
    assert 0 < (masks[True] == 0).sum() < masks[True].size


def test_a_wide_layers_draw_is_its_copies_draws(tmp_path, monkeypatch):
    """The wide kDropout's ``draw`` fills copy i's rows by copy i's own ``draw``: the
    numbers the copies draw one by one, in the same step."""
    net, worker, stub = engine_for(
        tmp_path, monkeypatch, runs=True, tag="draw",
        act="type: kDropout dropout_conf { dropout_ratio: 0.4 }",
    )  # fmt: skip
    (wide,) = [u for u in net.units() if type(u).__name__ == "DropoutLayer"]
    out = np.empty((4 * 6, 7), dtype=np.float32)
    wide.draw(out)
    for i in range(4):  # the copies' own draws of that step, their first of it again
        net.by_name[f"{i}#act"]._draws[1] = 0
    want = np.empty((4, 6, 7), dtype=np.float32)
    for i in range(4):
        net.by_name[f"{i}#act"].draw(want[i])
    np.testing.assert_array_equal(out, want.reshape(24, 7))
    assert len({float(out[6 * i, 0]) for i in range(4)}) == 4  # each copy its own
    with pytest.raises(ValueError, match="4 steps' rows"):
        wide.draw(np.empty((5, 7), dtype=np.float32))


def test_a_device_copy_moves_what_its_consumer_read(tmp_path, monkeypatch):
    """On a device: the copies of the kDummy steps move their data, the copies of the input
    layer's labels for the loss only the labels; a kind first read later is copied then and
    moved from then on."""
    from singa_core.netbuilder.transfer import DeviceTransfer

    net, worker, stub = engine_for(tmp_path, monkeypatch, runs=True, device="standin", tag="mv")
    transfers = [la for la in net.layers if isinstance(la, DeviceTransfer)]
    moves = {t.name: set(t._moves) for t in transfers}
    assert {n for n, m in moves.items() if m == {"data"}} == {f"{i}#emb>standin" for i in range(4)}
    assert {n for n, m in moves.items() if m == {"labels"}} == {
        "0#data>standin",
        *(f"0#data>standin#{k}" for k in range(2, 5)),
    }
    (wide,) = [u for u in net.units() if type(u) is DeviceTransfer and hasattr(u, "copies")]
    assert wide.copies == [net.by_name[f"{i}#emb>standin"] for i in range(4)]
    worker.train_one_batch(0, net, stub)
    label = net.by_name["0#data>standin"]
    src = net.srclayers(label)[0]
    got = label.data  # read for the first time: copied now
    np.testing.assert_array_equal(to_host(got), src.data)
    assert label._moves == {"data", "labels"}


def test_a_unit_without_kaggrad_writes_the_whole_sequences_gradient(tmp_path, monkeypatch):
    """The contract's gradient mode: under kAggGrad a wide kInnerProduct adds the sum over
    the steps into copy 0's gradient (what its copies add); without it, it writes that sum."""
    net, worker, stub = engine_for(tmp_path, monkeypatch, runs=True, tag="mode")
    worker.train_one_batch(0, net, stub)
    (ip,) = [u for u in net.units() if type(u).__name__ == "InnerProductLayer"]
    srcs = net.srclayers(ip)
    w = ip.params[0]
    w.grad.fill(1.0)
    ip.backward(kTrain | kBackward | kAggGrad, srcs)
    added = w.grad - 1.0
    ip.backward(kTrain | kBackward, srcs)
    np.testing.assert_allclose(w.grad, added, rtol=1e-5, atol=1e-6)
    copies = [net.by_name[f"{i}#out"] for i in range(4)]
    w.grad.fill(0.0)
    for c in reversed(copies):
        c.backward(kTrain | kBackward | kAggGrad, net.srclayers(c))
    np.testing.assert_allclose(w.grad, added, rtol=1e-5, atol=1e-6)


def test_gathering_the_steps_arrays_is_refused_while_a_step_is_captured(tmp_path, monkeypatch):
    """A unit's source not in one arena (the input layer's labels read by every loss copy)
    is gathered into a new array: fine eagerly, refused while a step is captured (a replay
    would copy the first step's array again)."""
    from singa_core import capture

    net, worker, stub = engine_for(tmp_path, monkeypatch, runs=True, tag="cap")
    worker.train_one_batch(0, net, stub)
    (loss,) = [u for u in net.units() if type(u).__name__ == "SoftmaxLossLayer"]
    labels = net.srclayers(loss)[1]
    assert labels.labels().shape == (4 * 6,)
    with pytest.raises(capture.CaptureRefused, match="concatenate"), capture.capturing():
        labels.labels()
