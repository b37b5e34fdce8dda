"""kEmbedding: y[i] = V[idx_i]; V.grad zeroed (kept under kAggGrad), rows accumulated."""

import numpy as np
import pytest
from singa_builtins.layers.embedding import EmbeddingLayer

from singa_core.errors import SingaError
from singa_core.layer import kAggGrad, kBackward, kForward, kTrain
from singa_core.testing import (
    GradCase,
    GradientChecker,
    SourceLayer,
    build,
    layer_conf,
    make_ctx,
    peak_bytes,
)

FWD, BWD = kTrain | kForward, kTrain | kBackward
CONF = 'name: "emb" embedding_conf { vocab_size: 7 feature_dim: 3 } param { name: "v" }'


def test_forward_backward_formulas():
    assert EmbeddingLayer.type_names == ("kEmbedding",)
    src = SourceLayer([2.0, 5.0, 2.0, 0.0], name="words")
    layer = build(EmbeddingLayer, CONF, [src])
    V = layer.vocab.value
    assert layer.shape == (4, 3) and V.shape == (7, 3) and layer.params == [layer.vocab]
    layer.forward(FWD, [src])
    np.testing.assert_array_equal(layer.data, V[[2, 5, 2, 0]])
    g = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    layer.grad[...] = g
    layer.vocab.grad[...] = 99.0  # stale values everywhere: all are zeroed
    src.grad[...] = np.nan
    layer.backward(BWD, [src])
    want = np.zeros((7, 3), dtype=np.float32)
    want[2] = g[0] + g[2]  # repeated indices add up
    want[5] = g[1]
    want[0] = g[3]
    np.testing.assert_allclose(layer.vocab.grad, want, rtol=1e-6)
    assert (src.grad == 0).all()  # the indices take no gradient


def test_agg_grad_accumulates():
    src = SourceLayer([[1.0], [3.0]])  # [B, 1] indices work too
    layer = build(EmbeddingLayer, CONF, [src])
    layer.forward(FWD, [src])
    layer.grad[...] = 1.0
    layer.vocab.grad[...] = 0.5
    layer.backward(BWD | kAggGrad, [src])
    want = np.full((7, 3), 0.5, dtype=np.float32)
    want[[1, 3]] += 1.0
    np.testing.assert_array_equal(layer.vocab.grad, want)


def test_indices_are_truncated_like_static_cast():
    src = SourceLayer([2.9, 0.2, -0.5], grad=False)
    layer = build(EmbeddingLayer, CONF, [src])
    layer.forward(FWD, [src])
    np.testing.assert_array_equal(layer.data, layer.vocab.value[[2, 0, 0]])
    layer.backward(BWD, [src])  # a source without gradient


@pytest.mark.parametrize("bad", [7.0, -1.0, np.nan, np.inf, 1e30])
def test_index_out_of_range_is_a_clear_error(bad):
    src = SourceLayer([1.0, bad], name="words")
    layer = build(EmbeddingLayer, CONF, [src])
    with pytest.raises(SingaError) as exc:
        layer.forward(FWD, [src])
    msg = str(exc.value)
    assert "'emb'" in msg and f"index {bad:g} of instance 1" in msg and "vocab_size 7" in msg


def test_setup_errors():
    ctx = make_ctx(locate=lambda field=None: f"job.conf:{field}")
    src = SourceLayer([1.0, 2.0])
    with pytest.raises(SingaError, match="positive embedding_conf.vocab_size") as exc:
        EmbeddingLayer(layer_conf('name: "e" param { name: "v" }'), ctx).setup([src])
    assert exc.value.where == "job.conf:embedding_conf.vocab_size"
    conf = 'name: "e" embedding_conf { vocab_size: 5 feature_dim: 0 } param { name: "v" }'
    with pytest.raises(SingaError, match="feature_dim"):
        EmbeddingLayer(layer_conf(conf), ctx).setup([src])
    with pytest.raises(SingaError, match="param entry"):
        EmbeddingLayer(layer_conf('name: "e" embedding_conf { vocab_size: 5 }'), ctx).setup([src])
    with pytest.raises(SingaError, match="one index per instance"):
        EmbeddingLayer(layer_conf(CONF), ctx).setup([SourceLayer(np.zeros((2, 3)))])
    with pytest.raises(SingaError, match="source"):
        EmbeddingLayer(layer_conf(CONF), ctx).setup([])


def test_no_allocation_per_step():
    idx = np.random.default_rng(0).integers(0, 1000, 64).astype(np.float32)
    src = SourceLayer(idx)
    conf = 'name: "e" embedding_conf { vocab_size: 1000 feature_dim: 200 } param { name: "v" }'
    layer = build(EmbeddingLayer, conf, [src])

    def step():
        layer.forward(FWD, [src])
        layer.backward(BWD, [src])

    assert peak_bytes(step) < 8_000  # vocab.grad is 800 KB; only index-sized temporaries


def _case(tmp_path):
    src = SourceLayer([3.0, 1.0, 3.0, 6.0, 0.0])
    layer = build(EmbeddingLayer, CONF, [src])
    # the indices are piecewise constant: only the vocabulary's gradient is checked
    return GradCase(layer, [src], GradientChecker(), check_srcs=[])


GRADIENT_CASES = {"kEmbedding": _case}
