"""Bias fusion across the kInnerProduct → activation (or softmax loss) edge
(singa_core/netbuilder/fusion.py): on a device the activation or loss adds the product's
bias in its own launch, the product's ``data`` still ends as ``x·Wᵀ + b``; on the CPU, for
a product read by two layers, or read by a layer that absorbs no bias, nothing fuses."""

from __future__ import annotations

import numpy as np
import pytest

from singa_core.device import standin_device, to_host
from singa_core.layer import kForward, kTrain
from singa_core.testing import blobs_csv, mlp_job
from tests.conftest import REPO

HIDDEN = {
    "kReLU": "type: kReLU",
    "kSigmoid": "type: kSigmoid",
    "kSTanh": "type: kSTanh",
    "RELU": "type: kActivation activation_conf { type: RELU }",
    "SIGMOID": "type: kActivation activation_conf { type: SIGMOID }",
    "TANH": "type: kActivation activation_conf { type: TANH }",
    "STANH": "type: kActivation activation_conf { type: STANH }",
    "in place": "type: kActivation activation_conf { type: TANH } share_src_blobs: true",
}


def _net(tmp_path, device, hidden="type: kSTanh", edit=lambda text: text):
    from singa_core.api.job import Job

    data = blobs_csv(tmp_path / "blobs.csv")
    conf = tmp_path / "job.conf"
    conf.write_text(edit(mlp_job(data, hidden_layer=hidden)))
    job = Job.from_file(conf, workspace=tmp_path / f"ws-{device}", device=device, seed=3)
    return job.prepare().nets[kTrain]


def _forward(net, biases):
    """One training forward pass with the given bias values (host arrays by layer)."""
    for name, b in biases.items():
        p = net.by_name[name].bias
        p.value[...] = net.by_name[name].device.asarray(b)
    for layer in net.layers:
        layer.forward(kTrain | kForward, net.srclayers(layer))


@pytest.mark.parametrize("hidden", sorted(HIDDEN))
def test_a_fused_products_data_is_x_w_plus_b_and_equals_the_cpu(tmp_path, hidden):
    rng = np.random.default_rng(1)
    biases = {"ip1": rng.standard_normal(16).astype(np.float32)}
    nets = {d: _net(tmp_path, d, HIDDEN[hidden]) for d in ("cpu", "standin")}
    dev = nets["standin"]
    ip1, act = dev.by_name["ip1"], dev.by_name["hidden"]
    assert ip1.deferred_bias is ip1.bias and act.absorbed_bias is ip1.bias
    ip2, loss = dev.by_name["ip2"], dev.by_name["loss"]
    assert ip2.deferred_bias is ip2.bias and loss.absorbed_bias is ip2.bias  # the logits'
    cpu = nets["cpu"]
    assert all(
        getattr(la, "deferred_bias", None) is None and getattr(la, "absorbed_bias", None) is None
        for la in cpu.layers
    )
    for net in nets.values():
        _forward(net, biases)
    x = to_host(dev.srclayers(ip1)[0].data).reshape(ip1.batchsize, -1)
    w, b = to_host(ip1.weight.value), to_host(ip1.bias.value)
    expect = x @ w.T + b
    if hidden == "in place":  # the activation's output is the product's data (as unfused)
        expect = np.tanh(expect)
    np.testing.assert_allclose(to_host(ip1.data), expect, rtol=1e-5, atol=1e-6)
    for name in ("ip1", "hidden", "ip2"):  # the stand-in runs the CPU's numpy steps
        np.testing.assert_array_equal(to_host(dev.by_name[name].data), cpu.by_name[name].data)
    loss = float(to_host(dev.by_name["loss"].loss))
    assert float(cpu.by_name["loss"].loss) == pytest.approx(loss, rel=1e-6)


def test_a_fused_pair_is_one_launch_fewer(tmp_path):
    from singa_core.contracts import standin

    net = _net(tmp_path, "standin", "type: kReLU")
    ip1, act = net.by_name["ip1"], net.by_name["hidden"]
    for layer in net.layers[: net.layers.index(ip1)]:
        layer.forward(kTrain | kForward, net.srclayers(layer))
    with standin.counting() as c:
        ip1.forward(kTrain | kForward, net.srclayers(ip1))
        act.forward(kTrain | kForward, net.srclayers(act))
    assert c.kernels == 2, c.by_name  # the product and the fused add + ReLU (unfused: 3)
    assert c.by_name["kernels:bias_relu_forward"] == 1


def test_the_softmax_loss_adds_the_logits_bias_in_its_forward_launch(tmp_path):
    """ip2 → kSoftmaxLoss (its second source, the labels, does not count): two launches
    where three were, the same logits, loss, probabilities and gradients as the CPU."""
    from singa_core.contracts import standin
    from singa_core.layer import kBackward

    rng = np.random.default_rng(2)
    biases = {"ip2": rng.standard_normal(3).astype(np.float32)}
    nets = {d: _net(tmp_path, d, "type: kReLU") for d in ("cpu", "standin")}
    dev = nets["standin"]
    ip2, loss = dev.by_name["ip2"], dev.by_name["loss"]
    for name, b in biases.items():
        for net in nets.values():
            net.by_name[name].bias.value[...] = net.by_name[name].device.asarray(b)
    for layer in dev.layers[: dev.layers.index(ip2)]:
        layer.forward(kTrain | kForward, dev.srclayers(layer))
    with standin.counting() as c:  # ip2, the labels' copy to the device, the loss
        for layer in dev.layers[dev.layers.index(ip2) :]:
            layer.forward(kTrain | kForward, dev.srclayers(layer))
    assert c.kernels == 2, c.by_name  # the product and the biased softmax (unfused: 3)
    assert c.by_name["kernels:bias_softmax_xent"] == 1
    cpu = nets["cpu"]
    for layer in cpu.layers:
        layer.forward(kTrain | kForward, cpu.srclayers(layer))
    for net in nets.values():
        for layer in reversed(net.layers):
            layer.backward(kTrain | kBackward, net.srclayers(layer))
    for name in ("ip2", "loss"):
        np.testing.assert_array_equal(to_host(dev.by_name[name].data), cpu.by_name[name].data)
    for p in ("weight", "bias"):
        got = to_host(getattr(ip2, p).grad)
        np.testing.assert_array_equal(got, getattr(cpu.by_name["ip2"], p).grad)
    assert float(to_host(loss.loss)) == float(cpu.by_name["loss"].loss)


def _second_reader(text):  # ip1 read by the activation and by another layer
    return text.replace(
        '  layer { name: "loss"',
        '  layer { name: "other" type: kReLU srclayers: "ip1" }\n  layer { name: "loss"',
    )


@pytest.mark.parametrize(
    "hidden, edit, why",
    [
        ("type: kReLU", _second_reader, "two readers (a split layer)"),
        ("type: kDropout", lambda t: t, "a consumer that is no activation"),
        ("type: kSoftmax", lambda t: t, "a consumer that is no activation"),
    ],
)
def test_what_is_not_fused(tmp_path, hidden, edit, why):
    net = _net(tmp_path, "standin", hidden, edit)
    assert net.by_name["ip1"].deferred_bias is None, why
    # only the logits' bias (ip2 → the loss) is fused
    assert [la.name for la in net.layers if getattr(la, "absorbed_bias", None) is not None] == [
        "loss"
    ], why
    _forward(net, {"ip1": np.full(16, 0.5, np.float32)})
    ip1 = net.by_name["ip1"]
    x = to_host(net.srclayers(ip1)[0].data).reshape(ip1.batchsize, -1)
    expect = x @ to_host(ip1.weight.value).T + 0.5
    np.testing.assert_allclose(to_host(ip1.data), expect, rtol=1e-5, atol=1e-6)


def test_no_fusion_on_the_cpu_or_across_devices(tmp_path):
    from singa_core.netbuilder.fusion import fuse_biases

    cpu = _net(tmp_path, "cpu", "type: kReLU")
    assert fuse_biases(cpu) == []
    dev = _net(tmp_path, "standin", "type: kReLU")
    assert fuse_biases(dev) == []  # paired once, at build: nothing left to pair
    act = dev.by_name["hidden"]
    assert act.absorbed_bias is dev.by_name["ip1"].bias
    assert standin_device() == act.device


def test_the_mnist_mlp_fuses_its_five_hidden_layers_and_its_loss(mnist_stores):
    from singa_core.api.job import Job

    job = Job.from_file(
        REPO / "examples" / "mnist" / "job.conf",
        [
            f"neuralnet.layer[0].store_conf.path={mnist_stores / 'train_data.bin'}",
            f"neuralnet.layer[1].store_conf.path={mnist_stores / 'test_data.bin'}",
        ],
        device="standin",
    )
    prepared = job.prepare()
    for net in prepared.nets.values():  # the test net too
        pairs = [(net.srclayers(c)[0].name, c.name) for c in net.layers
                 if getattr(c, "absorbed_bias", None) is not None]  # fmt: skip
        assert len(pairs) == 6, pairs  # five hidden layers and the loss
        assert all(net.by_name[p].deferred_bias is net.by_name[p].bias for p, _ in pairs)


def test_a_deploy_net_fuses_at_many_rows_and_predicts_as_the_cpu(tmp_path):
    from singa_core.api.job import Job

    data = blobs_csv(tmp_path / "blobs.csv")
    conf = tmp_path / "job.conf"
    conf.write_text(mlp_job(data, hidden_layer="type: kSigmoid", steps=5))
    ws = tmp_path / "ws"
    Job.from_file(conf, workspace=ws, seed=2, quiet=True).train()
    job = Job.from_file(conf, workspace=ws)
    x = np.random.default_rng(0).standard_normal((300, 4)).astype(np.float32)
    host = job.model(batch=256).predict(x)
    model = job.model(device="standin", batch=256)
    dev = model.predict(x)  # a pass of 256 rows (fused), then one of 64 (the few-row path)
    assert model.net.by_name["hidden"].absorbed_bias is model.net.by_name["ip1"].bias
    assert all(getattr(la, "absorbed_bias", None) is None for la in model._net_of(64).layers)
    np.testing.assert_allclose(dev, host, rtol=1e-6, atol=1e-7)
