"""kDummy: random input/output stand-in that otherwise copies data and gradients.

Includes SINGA 0.3's test_connection_layers.cc Dummy test (N=10, M=20: input → neuron →
output copies data and gradients exactly).
"""

import numpy as np
import pytest
from singa_builtins.layers.dummy import DummyLayer

from singa_core.errors import SingaError
from singa_core.layer import kBackward, kForward, kTrain
from singa_core.testing import GradCase, SourceLayer, build, layer_conf, make_ctx, peak_bytes

N, M = 10, 20
FWD, BWD = kTrain | kForward, kTrain | kBackward


def test_input_neuron_output_0_3():
    assert DummyLayer.type_names == ("kDummy",)
    inp = build(DummyLayer, f'name: "in" dummy_conf {{ input: true shape: {N} shape: {M} }}', [])
    neuron = build(DummyLayer, 'name: "neuron"', [inp])
    out = build(DummyLayer, 'name: "out" dummy_conf { output: true }', [neuron])
    assert inp.shape == neuron.shape == out.shape == (N, M)
    inp.forward(FWD, [])
    neuron.forward(FWD, [inp])
    out.forward(FWD, [neuron])
    assert ((inp.data >= 0) & (inp.data < 1)).all() and inp.data.std() > 0.1
    np.testing.assert_array_equal(neuron.data, inp.data)
    np.testing.assert_array_equal(out.data, inp.data)
    out.backward(BWD, [neuron])
    neuron.backward(BWD, [inp])
    inp.backward(BWD, [])
    assert ((out.grad >= 0) & (out.grad < 1)).all() and out.grad.std() > 0.1
    np.testing.assert_array_equal(neuron.grad, out.grad)
    np.testing.assert_array_equal(inp.grad, out.grad)


def test_random_values_come_from_the_layer_rng():
    conf = 'name: "in" dummy_conf { input: true output: true shape: 3 shape: 4 }'
    a = build(DummyLayer, conf, [], seed=7)
    b = build(DummyLayer, conf, [], seed=7)
    for layer in (a, b):
        layer.forward(FWD, [])
        layer.backward(BWD, [])
    np.testing.assert_array_equal(a.data, b.data)
    np.testing.assert_array_equal(a.grad, b.grad)
    want = np.random.default_rng(7).random((3, 4), dtype=np.float32)
    np.testing.assert_array_equal(a.data, want)
    assert not np.array_equal(a.data, a.grad)
    a.forward(FWD, [])
    assert not np.array_equal(a.data, b.data)  # new draws every forward


def test_source_without_gradient():
    src = SourceLayer(np.ones((2, 3)), grad=False)
    layer = build(DummyLayer, 'name: "d" dummy_conf { output: true }', [src])
    layer.forward(FWD, [src])
    layer.backward(BWD, [src])  # nothing to write into


def test_errors():
    ctx = make_ctx(locate=lambda field=None: f"job.conf:{field}")
    src = SourceLayer(np.ones((2, 3)))
    with pytest.raises(SingaError, match="needs a positive dummy_conf.shape") as exc:
        DummyLayer(layer_conf('name: "d" dummy_conf { input: true }'), ctx).setup([])
    assert exc.value.where == "job.conf:dummy_conf.shape"
    with pytest.raises(SingaError, match="positive"):
        DummyLayer(layer_conf('name: "d" dummy_conf { input: true shape: 0 }'), ctx).setup([])
    with pytest.raises(SingaError, match="takes no source layers, got 1"):
        conf = layer_conf('name: "d" dummy_conf { input: true shape: 2 }')
        DummyLayer(conf, ctx).setup([src])
    with pytest.raises(SingaError, match="takes 1 source layer unless"):
        DummyLayer(layer_conf('name: "d"'), ctx).setup([])
    with pytest.raises(SingaError, match="takes 1 source layer unless"):
        DummyLayer(layer_conf('name: "d"'), ctx).setup([src, src])


def test_no_allocation_per_step():
    src = SourceLayer(np.ones((64, 2000)))
    layer = build(DummyLayer, 'name: "d" dummy_conf { output: true }', [src])

    def step():
        layer.forward(FWD, [src])
        layer.backward(BWD, [src])

    assert peak_bytes(step) < 2_000


def _case(tmp_path):
    src = SourceLayer(np.random.default_rng(0).standard_normal((3, 4)))
    return GradCase(build(DummyLayer, 'name: "neuron"', [src]), [src])


GRADIENT_CASES = {"kDummy": _case}
