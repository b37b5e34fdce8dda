"""The rnnlm layers: each checked with singa's plugin kit (central differences, kAggGrad,
checkpoint round trip, determinism) and against the closed forms in their docstrings."""

from __future__ import annotations

import math

import numpy as np
import pytest
from singa_core.errors import SingaError
from singa_core.layer import Layer, kAggGrad, kBackward, kForward, kTrain
from singa_core.plugin_host.host import get_host
from singa_core.testing import GradientChecker, build, check_layer, layer_conf

from singa_rnnlm import rnnlm_pb2
from singa_rnnlm.corpus import learn_vocabulary, read_words, write_store
from singa_rnnlm.data import RnnlmDataLayer
from singa_rnnlm.embedding import RnnlmEmbeddingLayer
from singa_rnnlm.hidden import RnnlmHiddenLayer
from singa_rnnlm.loss import RnnlmLossLayer

EMBEDDING = """name: "embedding"
[singa_rnnlm.embedding_conf] { word_dim: 4 vocab_size: 7 }
param { name: "w1" }"""
HIDDEN = 'name: "hidden" param { name: "w2" }'
LOSS = """name: "loss"
[singa_rnnlm.loss_conf] { nclass: 3 vocab_size: 7 }
param { name: "w3" } param { name: "w4" }"""

# the words of a window of 4 (slot 0 = previous word, slots 1..4 the words to predict):
# vocabulary of 7 words in classes [0, 2), [2, 5), [5, 7)
RECORDS = np.array(
    [(0, 0, 0, 2), (1, 0, 0, 2), (3, 1, 2, 5), (6, 2, 5, 7), (3, 1, 2, 5), (0, 0, 0, 0)],
    dtype=np.int64,
)


class WindowSource(Layer):
    """A stand-in for kData / kEmbedding / kHidden: rows of data, a window, word records
    (a Layer rather than a SourceLayer, so that check_layer uses it as it is)."""

    num_srclayers = (0, 0)

    def __init__(self, data, window, records=None, *, grad=True, name="src"):
        super().__init__(layer_conf(name=name))
        self.data = np.array(data, dtype=np.float32)
        self.grad = np.zeros_like(self.data) if grad else None
        self.window = window
        if records is not None:
            self.records = np.asarray(records, dtype=np.int64)

    def setup(self, srcs):
        pass

    def forward(self, phase, srcs):
        pass


def data_source(records=RECORDS, window=4):
    return WindowSource(np.asarray(records, np.float32), window, records, grad=False, name="data")


def rows(window=4, dim=4, n=6, seed=0):
    return np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


# -- kEmbedding -----------------------------------------------------------------------------
def test_embedding_gradients_and_contract():
    records = RECORDS.copy()
    records[:4, 0] = (3, 1, 3, 5)  # word 3 twice in the window
    check_layer(RnnlmEmbeddingLayer, EMBEDDING, [data_source(records)], shape=(6, 4))


def test_embedding_adds_the_gradients_of_a_repeated_word():
    records = RECORDS.copy()
    records[:4, 0] = (3, 1, 3, 5)
    src = data_source(records)
    layer = build(RnnlmEmbeddingLayer, EMBEDDING, [src])
    layer.forward(kTrain | kForward, [src])
    np.testing.assert_array_equal(layer.data[:4], layer.embed.value[[3, 1, 3, 5]])
    g = rows(seed=1)
    layer.grad[...] = g
    layer.backward(kTrain | kBackward, [src])
    np.testing.assert_allclose(layer.embed.grad[3], g[0] + g[2], rtol=1e-6)  # 0.3 kept g[2]
    np.testing.assert_allclose(layer.embed.grad[[1, 5]], g[[1, 3]], rtol=1e-6)
    assert not layer.embed.grad[[0, 2, 4, 6]].any()


def test_embedding_reads_only_the_window_and_checks_indices():
    records = RECORDS.copy()
    records[4:, 0] = 99  # past the window: never read
    src = data_source(records)
    layer = build(RnnlmEmbeddingLayer, EMBEDDING, [src])
    layer.forward(kTrain | kForward, [src])
    src.records[1, 0] = 7  # vocab_size is 7
    with pytest.raises(SingaError, match=r"word index 7 \(slot 1.*outside \[0, 7\)"):
        layer.forward(kTrain | kForward, [src])


# -- kHidden --------------------------------------------------------------------------------
@pytest.mark.parametrize("window", [4, 1, 6])
def test_hidden_gradients_and_contract(window):
    src = WindowSource(rows(), window, name="embedding")
    check_layer(RnnlmHiddenLayer, HIDDEN, [src], shape=(6, 4), param_std=0.5)


def test_hidden_forward_is_the_recurrence_and_restarts_each_window():
    x = rows()
    src = WindowSource(x, 4)
    layer = build(RnnlmHiddenLayer, HIDDEN, [src], param_std=0.5)
    W = layer.weight.value.astype(np.float64)
    for _ in range(2):  # the second window starts from sigmoid(x_0) again
        layer.forward(kTrain | kForward, [src])
        h = _sigmoid(x[0].astype(np.float64))
        np.testing.assert_allclose(layer.data[0], h, rtol=1e-6)
        for t in range(1, 4):
            h = _sigmoid(h @ W + x[t])
            np.testing.assert_allclose(layer.data[t], h, rtol=1e-5)


def test_hidden_strided_source_gives_the_same_output():
    x = rows()
    plain, strided = WindowSource(x, 5), WindowSource(x, 5)
    strided.data = np.asfortranarray(x)
    a = build(RnnlmHiddenLayer, HIDDEN, [plain], param_std=0.5)
    b = build(RnnlmHiddenLayer, HIDDEN, [strided], param_std=0.5)
    a.forward(kTrain | kForward, [plain])
    b.forward(kTrain | kForward, [strided])
    np.testing.assert_allclose(a.data[:5], b.data[:5], rtol=1e-6)
    GradientChecker().check(b, [strided])


# -- kLoss ----------------------------------------------------------------------------------
def loss_sources(window=4, seed=0):
    return [WindowSource(rows(seed=seed), window, name="hidden"), data_source(window=window)]


@pytest.mark.parametrize("window", [4, 1])
def test_loss_gradients_and_contract(window):
    check_layer(RnnlmLossLayer, LOSS, loss_sources(window), shape=(6, 3), param_std=0.5)


def test_loss_is_the_class_factorised_likelihood_and_reports_perplexity():
    srcs = loss_sources()
    layer = build(RnnlmLossLayer, LOSS, srcs, param_std=0.5)
    layer.forward(kTrain | kForward, srcs)
    h = srcs[0].data.astype(np.float64)
    U = layer.word_weight.value.astype(np.float64)
    C = layer.class_weight.value.astype(np.float64)

    def softmax(z):
        e = np.exp(z - z.max())
        return e / e.sum()

    nll = 0.0
    for t in range(4):
        w, c, s, e = RECORDS[t + 1]
        nll -= math.log(softmax(C @ h[t])[c] * softmax(U[s:e] @ h[t])[w - s])
    assert layer.loss == pytest.approx(nll, rel=1e-5)  # the window's sum (the gradient's)
    layer.forward(kTrain | kForward, srcs)  # metrics cover both windows: 8 words
    metrics = layer.pop_metrics()
    assert metrics["loss"] == pytest.approx(nll / 4, rel=1e-5)
    assert metrics["ppl"] == pytest.approx(math.exp(nll / 4), rel=1e-5)
    assert layer.pop_metrics() == {}


def test_loss_only_the_class_rows_of_the_word_weights_get_a_gradient():
    srcs = loss_sources(window=1)  # predicts word 1 of class [0, 2)
    layer = build(RnnlmLossLayer, LOSS, srcs, param_std=0.5)
    layer.forward(kTrain | kForward, srcs)
    layer.backward(kTrain | kBackward, srcs)
    assert layer.word_weight.grad[:2].any() and not layer.word_weight.grad[2:].any()
    assert not srcs[0].grad[1:].any()  # slots past the window get no gradient


def test_loss_rejects_labels_outside_its_classes():
    records = RECORDS.copy()
    records[2] = (3, 3, 2, 5)  # class 3 with nclass 3
    srcs = [WindowSource(rows(), 4), data_source(records)]
    layer = build(RnnlmLossLayer, LOSS, srcs)
    with pytest.raises(SingaError, match=r"word 3 \(slot 2.*class 3.*nclass 3"):
        layer.forward(kTrain | kForward, srcs)


def test_agg_grad_adds_across_two_windows():
    """With kAggGrad the gradients of two windows add up (one update for both)."""
    srcs = loss_sources()
    layer = build(RnnlmLossLayer, LOSS, srcs, param_std=0.5)

    def window(seed, phase=kTrain | kBackward):
        srcs[0].data[...] = rows(seed=seed)
        layer.forward(kTrain | kForward, srcs)
        layer.backward(phase, srcs)
        return layer.word_weight.grad.copy(), layer.class_weight.grad.copy()

    g1, g2 = window(1), window(2)
    window(1)
    both = window(2, kTrain | kBackward | kAggGrad)
    for a, b, c in zip(both, g1, g2, strict=True):
        np.testing.assert_allclose(a, b + c, rtol=1e-5, atol=1e-6)


# -- kData ----------------------------------------------------------------------------------
TEXT = "a b c d e\nb a\nc\n"


def make_store(tmp_path, text=TEXT):
    words = read_words(text)
    vocab = learn_vocabulary(words, 2)
    path = tmp_path / "words.bin"
    write_store(words, vocab, path, get_host().get("store", "kvfile"))
    return path, vocab


def data_layer(path, max_window=3):
    conf = f'name: "data" [singa_rnnlm.data_conf] {{ path: "{path}" max_window: {max_window} }}'
    return build(RnnlmDataLayer, conf, [])


def windows_of(layer, n):
    out = []
    for _ in range(n):
        layer.forward(kTrain | kForward, [])
        out.append([int(v) for v in layer.records[: layer.window + 1, 0]])
    return out


def test_data_windows_stop_at_the_end_of_a_sentence_and_cycle(tmp_path):
    path, vocab = make_store(tmp_path)
    ix = vocab.index()
    a, b, c, d, e = (ix[w] for w in "abcde")
    layer = data_layer(path)
    assert layer.data.shape == (4, 4)
    got = windows_of(layer, 6)
    assert got == [
        [0, a, b, c],  # slot 0 starts as "</s>"
        [c, d, e, 0],  # stops after "</s>"
        [0, b, a, 0],
        [0, c, 0],
        [0, a, b, c],  # the store again from its start: the same windows
        [c, d, e, 0],
    ]
    cls = vocab.classes[d]  # slot 1 of the last window
    assert tuple(layer.records[1]) == (d, cls, vocab.class_start[cls], vocab.class_end[cls])
    np.testing.assert_array_equal(layer.data, layer.records.astype(np.float32))


def test_data_contract_and_resume(tmp_path):
    path, _ = make_store(tmp_path)
    check_layer(
        RnnlmDataLayer,
        f'name: "data" [singa_rnnlm.data_conf] {{ path: "{path}" max_window: 3 }}',
        [],
        shape=(4, 4),
        no_gradient=True,
    )
    layer = data_layer(path)
    windows_of(layer, 3)
    state = layer.state_dict()
    rest = windows_of(layer, 3)
    resumed = data_layer(path)
    resumed.load_state_dict(state)
    assert windows_of(resumed, 3) == rest


def test_data_errors(tmp_path):
    with pytest.raises(SingaError, match="cannot open store"):
        data_layer(tmp_path / "missing.bin")
    path, _ = make_store(tmp_path)
    with pytest.raises(SingaError, match="max_window must be positive"):
        data_layer(path, max_window=0)
    with pytest.raises(SingaError, match=r"needs its \[data_conf\] block"):
        build(RnnlmDataLayer, 'name: "data"', [])
    bad = tmp_path / "bad.bin"
    store = get_host().get("store", "kvfile")()
    store.open(str(bad), 0)
    store.write(b"00000", b"\x0a\x05ab")  # a string field cut short: not a WordRecord
    store.close()
    with pytest.raises(SingaError, match="record '00000' of .* is not a WordRecord"):
        data_layer(bad)
    store = get_host().get("store", "kvfile")()
    store.open(str(bad), 0)
    rec = rnnlm_pb2.WordRecord(word="x", word_index=4, class_index=0, class_start=0, class_end=3)
    store.write(b"00000", rec.SerializeToString())
    store.close()
    with pytest.raises(SingaError, match=r"inconsistent: word_index 4.*\[0, 3\)"):
        data_layer(bad)
