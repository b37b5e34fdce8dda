"""kRNNLabel: copy t's labels are step t + 1 of the kCharRNN window (the next character)."""

import types

import numpy as np
import pytest
from singa_builtins.layers.char_rnn import CharRNNLayer
from singa_builtins.layers.rnn_label import RNNLabelLayer
from singa_builtins.layers.softmax_loss import SoftmaxLossLayer

from singa_core.errors import SingaError
from singa_core.layer import kForward, kTrain
from singa_core.testing import GradCase, SourceLayer, build, layer_conf

FWD = kTrain | kForward


def char_rnn(tmp_path, unroll_len=3):
    (tmp_path / "t.txt").write_text("abcdefgh" * 4)
    (tmp_path / "v.txt").write_text("abcdefgh")
    conf = (
        f'name: "data" char_rnn_conf {{ path: "{tmp_path / "t.txt"}" '
        f'vocab_path: "{tmp_path / "v.txt"}" batchsize: 2 unroll_len: {unroll_len} }}'
    )
    return build(CharRNNLayer, conf, [])


def label(data, t):
    conf = layer_conf('name: "label"', unroll_index=t)
    consumer = types.SimpleNamespace(conf=conf, name=conf.name)  # the layer, before it exists
    layer = build(RNNLabelLayer, conf, [data.output_for(consumer)])
    return layer


def test_labels_are_the_next_step(tmp_path):
    data = char_rnn(tmp_path)
    labels = [label(data, t) for t in range(3)]
    for _ in range(2):
        data.forward(FWD, [])
        for t, layer in enumerate(labels):
            layer.forward(FWD, [data.output_for(layer)])
            np.testing.assert_array_equal(layer.labels(), data.data[t + 1].astype(np.int64))
    # a loss layer takes them as its label source
    logits = SourceLayer(np.eye(8)[labels[0].labels()] * 50.0)
    loss = build(SoftmaxLossLayer, 'name: "loss"', [logits, labels[0]])
    loss.forward(FWD, [logits, labels[0]])
    assert loss.pop_metrics()["accuracy"] == pytest.approx(1.0)


def test_errors(tmp_path):
    data = char_rnn(tmp_path, unroll_len=2)
    with pytest.raises(SingaError, match="needs step 3"):
        label(data, 2)
    with pytest.raises(SingaError, match="holds no character sequence"):
        build(RNNLabelLayer, 'name: "l"', [SourceLayer(np.zeros((2, 1)))])


def _case(tmp_path):
    data = char_rnn(tmp_path)
    data.forward(FWD, [])
    layer = label(data, 1)
    return GradCase(layer, [data.output_for(layer)], no_gradient="an input (label) layer")


GRADIENT_CASES = {"kRNNLabel": _case}
