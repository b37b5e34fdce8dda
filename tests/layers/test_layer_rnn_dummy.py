"""kRNNDummy: U(low, high) data without a source; with one, its data and gradient pass through."""

import numpy as np
import pytest
from singa_builtins.layers.rnn_dummy import RNNDummyLayer

from singa_core.errors import SingaError
from singa_core.layer import kBackward, kForward, kTrain
from singa_core.testing import GradCase, SourceLayer, build, layer_conf, make_ctx, peak_bytes

FWD, BWD = kTrain | kForward, kTrain | kBackward


def test_generates_uniform_data():
    assert RNNDummyLayer.type_names == ("kRNNDummy",)
    conf = 'name: "d" rnn_dummy_conf { shape: 200 shape: 3 low: -2 high: 5 }'
    layer = build(RNNDummyLayer, conf, [], seed=3)
    assert layer.shape == (200, 3) and layer.dynamic_srclayer is None
    layer.forward(FWD, [])
    u = np.random.default_rng(3).random((200, 3), dtype=np.float32)
    np.testing.assert_allclose(layer.data, -2 + 7 * u, rtol=1e-6)
    assert layer.data.min() >= -2 and layer.data.max() < 5
    first = layer.data.copy()
    layer.forward(FWD, [])
    assert not np.array_equal(first, layer.data)  # new draws every forward
    layer.backward(BWD, [])  # no source: nothing to do


def test_integer_values_stay_below_high():
    conf = 'name: "d" rnn_dummy_conf { shape: 5000 low: 0 high: 101 integer: true }'
    layer = build(RNNDummyLayer, conf, [])
    layer.forward(FWD, [])
    assert (layer.data == np.floor(layer.data)).all()
    assert layer.data.min() >= 0 and layer.data.max() <= 100
    assert len(np.unique(layer.data)) == 101


def test_with_a_source_shares_data_and_passes_the_gradient():
    src = SourceLayer(np.arange(6).reshape(3, 2), name="chars")
    conf = 'name: "d" rnn_dummy_conf { dynamic_srclayer: "sample" shape: 9 }'
    layer = build(RNNDummyLayer, conf, [src])
    assert layer.dynamic_srclayer == "sample"
    assert layer.data is src.data and layer.shape == (3, 2)
    other = SourceLayer(np.ones((3, 2)), name="sample")  # e.g. swapped in by a BPTT worker
    layer.forward(FWD, [other])
    assert layer.data is other.data
    g = np.random.default_rng(0).standard_normal((3, 2)).astype(np.float32)
    layer.grad[...] = g
    layer.backward(BWD, [other])
    np.testing.assert_array_equal(other.grad, g)
    src_nograd = SourceLayer(np.ones((3, 2)), grad=False)
    layer.backward(BWD, [src_nograd])


def test_errors():
    ctx = make_ctx(locate=lambda field=None: f"job.conf:{field}")
    with pytest.raises(SingaError, match="positive rnn_dummy_conf.shape") as exc:
        RNNDummyLayer(layer_conf('name: "d" rnn_dummy_conf { high: 1 }'), ctx).setup([])
    assert exc.value.where == "job.conf:rnn_dummy_conf.shape"
    with pytest.raises(SingaError, match="low and high are both 3"):
        conf = layer_conf('name: "d" rnn_dummy_conf { shape: 2 low: 3 high: 3 }')
        RNNDummyLayer(conf, ctx).setup([])
    src = SourceLayer(np.ones((2, 2)))
    with pytest.raises(SingaError, match="source"):
        RNNDummyLayer(layer_conf('name: "d"'), ctx).setup([src, src])


def test_no_allocation_per_step():
    conf = 'name: "d" rnn_dummy_conf { shape: 64 shape: 2000 low: 0 high: 9 integer: true }'
    layer = build(RNNDummyLayer, conf, [])
    src = SourceLayer(np.ones((64, 2000)))
    passthrough = build(RNNDummyLayer, 'name: "p"', [src])

    def step():
        layer.forward(FWD, [])
        passthrough.forward(FWD, [src])
        passthrough.backward(BWD, [src])

    assert peak_bytes(step) < 2_000


def _case(tmp_path):
    src = SourceLayer(np.random.default_rng(0).standard_normal((3, 4)))
    return GradCase(build(RNNDummyLayer, 'name: "d"', [src]), [src])


GRADIENT_CASES = {"kRNNDummy": _case}
