"""kOneHot: [B] indices to [B, vocab_size] one-hot rows; an input layer (no gradient)."""

import numpy as np
import pytest
from singa_builtins.layers.onehot import OneHotLayer

from singa_core.errors import SingaError
from singa_core.layer import kBackward, kForward, kTrain
from singa_core.testing import GradCase, SourceLayer, build, layer_conf, make_ctx, peak_bytes

FWD, BWD = kTrain | kForward, kTrain | kBackward
CONF = 'name: "onehot" onehot_conf { vocab_size: 5 }'


def test_one_hot_rows():
    assert OneHotLayer.type_names == ("kOneHot",)
    assert OneHotLayer.one_to_many and OneHotLayer.num_srclayers == (1, 1)
    src = SourceLayer([3.0, 0.0, 4.0, 3.0], name="chars")
    layer = build(OneHotLayer, CONF, [src])
    assert layer.shape == (4, 5) and layer.grad is None and layer.grad_for(layer) is None
    layer.forward(FWD, [src])
    np.testing.assert_array_equal(layer.data, np.eye(5, dtype=np.float32)[[3, 0, 4, 3]])
    src.data[...] = 1.0  # every row: index 1
    layer.forward(FWD, [src])  # earlier ones are cleared
    np.testing.assert_array_equal(layer.data, np.eye(5, dtype=np.float32)[[1, 1, 1, 1]])
    src.grad[...] = 7.0
    layer.backward(BWD, [src])
    assert (src.grad == 7.0).all()  # no gradient to the source


def test_index_out_of_range_is_a_clear_error():
    src = SourceLayer([[0.0], [5.0]], name="chars")
    layer = build(OneHotLayer, CONF, [src])
    with pytest.raises(SingaError) as exc:
        layer.forward(FWD, [src])
    msg = str(exc.value)
    assert "'onehot'" in msg and "index 5 of instance 1" in msg and "vocab_size 5" in msg


def test_setup_errors():
    ctx = make_ctx(locate=lambda field=None: f"job.conf:{field}")
    src = SourceLayer([1.0, 2.0])
    with pytest.raises(SingaError, match="positive onehot_conf.vocab_size") as exc:
        OneHotLayer(layer_conf('name: "o"'), ctx).setup([src])
    assert exc.value.where == "job.conf:onehot_conf.vocab_size"
    with pytest.raises(SingaError, match="one index per instance"):
        OneHotLayer(layer_conf(CONF), ctx).setup([SourceLayer(np.zeros((2, 2)))])
    with pytest.raises(SingaError, match="source"):
        OneHotLayer(layer_conf(CONF), ctx).setup([])


def test_no_allocation_per_step():
    src = SourceLayer(np.random.default_rng(0).integers(0, 1000, 64).astype(np.float32))
    layer = build(OneHotLayer, 'name: "o" onehot_conf { vocab_size: 1000 }', [src])

    def step():
        layer.forward(FWD, [src])
        layer.backward(BWD, [src])

    assert peak_bytes(step) < 4_000


def _case(tmp_path):
    src = SourceLayer([1.0, 0.0, 4.0], grad=False)
    layer = build(OneHotLayer, CONF, [src])
    assert layer.grad_for(layer) is None
    return GradCase(layer, [src], no_gradient="an input layer: indices take no gradient")


GRADIENT_CASES = {"kOneHot": _case}
