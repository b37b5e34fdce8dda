"""kCharRNN: character streams for an unrolled char-level RNN (SINGA 0.3 §2.2,
input_layer/char_rnn.cc).

``char_rnn_conf {path, vocab_path, unroll_len (50), batchsize (1)}``. The text at ``path``
is read once and mapped to vocabulary indices (see ``_text.read_vocab``). The batch holds
``batchsize`` streams; stream ``i`` starts at ``i·stride`` with ``stride = len // batchsize``.
Each forward fills ``unroll_len + 1`` time steps: ``data[l, i]`` (``l = 0 … unroll_len``) is
the index of the character at ``i·stride + offset + l``; then ``offset += unroll_len``, so
the last character of one window is the first of the next (it is the last label and then
the next input). Streams are read in order, without shuffling.

Consumers are unrolled layers: copy ``t`` (``unroll_index`` t) of a consumer sees time step
``t`` as its source's ``data`` (a ``(batchsize,)`` array; 0.3's ``data(unroll_index)``) and
the whole ``(unroll_len + 1, batchsize)`` block as ``sequence`` (kRNNLabel reads step t+1).

Deviation: the offset wraps to 0 when the next window would pass the end of the stream
(``offset + unroll_len ≥ stride``); 0.3 wrapped only once ``offset ≥ stride``, so its last
window read into the next stream, and past the end of the text for the last one.
The cursor is saved in checkpoints, so ``--resume`` continues with the next window.
"""

from __future__ import annotations

import types

import numpy as np
from singa_builtins.layers._text import encode, read_text_file, read_vocab

from singa_core.layer import InputLayer, Layer
from singa_core.sequences import SequenceArena, SequenceSlot


class CharRNNStep:
    """Time step ``index`` of a :class:`CharRNNLayer`, as one consumer's source."""

    one_to_many = True
    is_loss = False

    def __init__(self, layer: CharRNNLayer, index: int) -> None:
        self.layer = layer
        self.index = index
        self.name = layer.name
        self.params: list = []
        self.grad = None
        if index < layer.unroll_len:  # the steps the unrolled copies read, as one arena:
            # consumers that run all their copies at once read them together
            # (singa_core.sequences)
            self.data = layer._steps_arena.views["data"][index]
            self.ctx = types.SimpleNamespace(sequence=SequenceSlot(layer._steps_arena, index))
        else:
            self.data = layer.data[index]  # a view: refreshed in place by every forward

    @property
    def sequence(self) -> np.ndarray:
        return self.layer.data

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)

    def grad_for(self, consumer) -> None:
        return None

    def labels(self) -> None:
        return None


class CharRNNLayer(InputLayer):
    type_names = ("kCharRNN",)
    placement = "host"  # reads records/files on the CPU; the net copies its output

    def setup(self, srcs):
        self.expect_srcs(srcs)
        conf = self.conf.char_rnn_conf
        self.unroll_len, self.batchsize = int(conf.unroll_len), int(conf.batchsize)
        if self.unroll_len < 1 or self.batchsize < 1:
            raise self.error(
                f"layer '{self.name}' (kCharRNN): char_rnn_conf.unroll_len and batchsize must "
                f"be positive, got {self.unroll_len} and {self.batchsize}",
                field="char_rnn_conf.unroll_len"
                if self.unroll_len < 1
                else "char_rnn_conf.batchsize",
                help="set unroll_len (characters per sequence) and batchsize (sequences per "
                "batch) to positive numbers, e.g. 50 and 32",
            )
        self.vocab = read_vocab(self, conf.vocab_path, "char_rnn_conf.vocab_path")
        text = read_text_file(self, conf.path, "char_rnn_conf.path", "text file")
        self.codes = encode(self, text, self.vocab, conf.path, "char_rnn_conf.path")
        self.stride = len(self.codes) // self.batchsize
        if self.stride < self.unroll_len + 1:
            raise self.error(
                f"layer '{self.name}' (kCharRNN): {conf.path} holds {len(self.codes)} "
                f"characters, too few for {self.batchsize} streams of windows of "
                f"{self.unroll_len + 1}",
                field="char_rnn_conf",
                help="use a longer text, or a smaller batchsize or unroll_len",
            )
        self.alloc((self.unroll_len + 1, self.batchsize), grad=False)
        self._steps_arena = SequenceArena(self.unroll_len)
        self._steps_arena.adopt("data", self.data[: self.unroll_len])
        self.offset = 0
        self._steps = np.arange(self.unroll_len + 1)[:, None]
        self._starts = np.arange(self.batchsize) * self.stride
        self._parts: dict[int, CharRNNStep] = {}

    @property
    def windows_per_epoch(self) -> int:
        return (self.stride - 1) // self.unroll_len

    def output_for(self, consumer: Layer) -> CharRNNStep:
        t = int(consumer.conf.unroll_index)
        if t > self.unroll_len:
            raise self.error(
                f"layer '{consumer.name}' reads time step {t} of '{self.name}', which holds "
                f"steps 0 … {self.unroll_len} (char_rnn_conf.unroll_len {self.unroll_len})",
                field="char_rnn_conf",
                help="char_rnn_conf.unroll_len must be at least the unroll_len of the "
                "layers reading it",
            )
        part = self._parts.get(t)
        if part is None:
            part = self._parts[t] = CharRNNStep(self, t)
        return part

    def forward(self, phase, srcs):
        np.copyto(self.data, self.codes[self._starts + self.offset + self._steps])
        self.offset += self.unroll_len
        if self.offset + self.unroll_len >= self.stride:
            self.offset = 0

    def state_dict(self):
        return {"offset": int(self.offset)}

    def load_state_dict(self, state):
        self.offset = int(state.get("offset", 0))
