"""kCharRNN: windows of unroll_len + 1 characters from batchsize streams of a text."""

import types

import numpy as np
import pytest
from singa_builtins.layers.char_rnn import CharRNNLayer

from singa_core.errors import SingaError
from singa_core.layer import kBackward, kForward, kTrain
from singa_core.testing import GradCase, build, layer_conf, make_ctx

FWD = kTrain | kForward


def write_text(tmp_path, text, vocab):
    (tmp_path / "t.txt").write_text(text, newline="")
    (tmp_path / "v.txt").write_text(vocab, newline="")
    return tmp_path / "t.txt", tmp_path / "v.txt"


def char_rnn(path, vocab, batchsize, unroll_len, ctx=None):
    conf = (
        f'name: "data" char_rnn_conf {{ path: "{path}" vocab_path: "{vocab}" '
        f"batchsize: {batchsize} unroll_len: {unroll_len} }}"
    )
    return build(CharRNNLayer, conf, [], ctx=ctx)


class Consumer:
    def __init__(self, t):
        self.conf = types.SimpleNamespace(unroll_index=t)
        self.name = f"{t}#x"


def test_windows_streams_and_wrap(tmp_path):
    text = "abcdefghijklmnopqrstuvwxyz"  # 26 characters
    path, vocab = write_text(tmp_path, text, "zyxwvutsrqponmlkjihgfedcba")
    layer = char_rnn(path, vocab, batchsize=2, unroll_len=4)
    # index of c = its position in the vocabulary file (z = 0 ... a = 25)
    code = {ch: k for k, ch in enumerate("zyxwvutsrqponmlkjihgfedcba")}
    assert layer.shape == (5, 2) and layer.stride == 13
    assert layer.windows_per_epoch == 3

    def window(starts):
        return np.array([[code[text[s + i]] for s in starts] for i in range(5)], dtype=np.float32)

    layer.forward(FWD, [])
    np.testing.assert_array_equal(layer.data, window([0, 13]))  # a..e and n..r
    layer.forward(FWD, [])
    np.testing.assert_array_equal(layer.data, window([4, 17]))  # the last char is reused
    layer.forward(FWD, [])
    np.testing.assert_array_equal(layer.data, window([8, 21]))  # i..m, v..z: fits exactly
    layer.forward(FWD, [])  # 12 + 4 ≥ 13: back to the start
    np.testing.assert_array_equal(layer.data, window([0, 13]))


def test_consumers_see_their_time_step(tmp_path):
    path, vocab = write_text(tmp_path, "abcabcabcabc", "abc")
    layer = char_rnn(path, vocab, batchsize=1, unroll_len=3)
    parts = [layer.output_for(Consumer(t)) for t in range(4)]
    assert layer.output_for(Consumer(2)) is parts[2]
    layer.forward(FWD, [])
    assert [float(p.data[0]) for p in parts] == [0, 1, 2, 0]
    assert parts[1].sequence is layer.data and parts[1].grad_for(None) is None
    layer.forward(FWD, [])  # the views follow the layer's buffer
    assert [float(p.data[0]) for p in parts] == [0, 1, 2, 0]
    with pytest.raises(SingaError, match="reads time step 4"):
        layer.output_for(Consumer(4))


def test_cursor_round_trip(tmp_path):
    path, vocab = write_text(tmp_path, "abcd" * 20, "abcd")
    a = char_rnn(path, vocab, batchsize=2, unroll_len=3)
    a.forward(FWD, [])
    a.forward(FWD, [])
    b = char_rnn(path, vocab, batchsize=2, unroll_len=3)
    b.load_state_dict(a.state_dict())
    a.forward(FWD, [])
    b.forward(FWD, [])
    np.testing.assert_array_equal(a.data, b.data)


def test_errors(tmp_path):
    where = make_ctx(locate=lambda field=None: f"job.conf:{field}")
    path, vocab = write_text(tmp_path, "ab\nc", "abc")
    with pytest.raises(SingaError) as exc:
        char_rnn(path, vocab, 1, 1, ctx=where)
    assert "t.txt:1:3: character '\\n' is not in the vocabulary" in str(exc.value)
    assert exc.value.where == "job.conf:char_rnn_conf.path"
    path, vocab = write_text(tmp_path, "abcabc", "abca")
    with pytest.raises(SingaError, match="lists 'a' twice"):
        char_rnn(path, vocab, 1, 1)
    path, vocab = write_text(tmp_path, "abcabc", "abc")
    with pytest.raises(SingaError, match="too few for 2 streams"):
        char_rnn(path, vocab, 2, 3)
    with pytest.raises(SingaError) as exc:
        char_rnn(tmp_path / "missing.txt", vocab, 1, 1)
    assert "does not exist" in str(exc.value) and "singa data tinyshakespeare" in exc.value.help
    with pytest.raises(SingaError, match="needs char_rnn_conf.vocab_path"):
        CharRNNLayer(layer_conf('name: "d" char_rnn_conf { path: "x" }'), make_ctx()).setup([])


def _case(tmp_path):
    path, vocab = write_text(tmp_path, "hello world " * 4, "helo wrd")
    layer = char_rnn(path, vocab, batchsize=2, unroll_len=3)
    layer.backward(kTrain | kBackward, [])
    return GradCase(layer, [], no_gradient="an input layer")


GRADIENT_CASES = {"kCharRNN": _case}
