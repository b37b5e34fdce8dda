"""kCharRNNOutput: print sampled characters (SINGA 0.3 §2.5, output_layer/char_rnn.cc).

One source holding one vocabulary index per row in its first column (a kArgSort with
``topk: 1``, or any layer of shape ``(B,)``/``(B, k)``); the vocabulary comes from
``char_rnn_conf.vocab_path``. Every forward writes ``vocab[index]`` of each row to standard
output, unbuffered, so a sampling run prints its text as it is generated; ``close`` (the end
of an evaluation pass) ends the line. No gradient.
"""

from __future__ import annotations

import sys

import numpy as np
from singa_builtins.layers._text import read_vocab

from singa_core.layer import OutputLayer


class CharRNNOutputLayer(OutputLayer):
    type_names = ("kCharRNNOutput",)
    placement = "host"  # reads records/files on the CPU; the net copies its output

    def setup(self, srcs):
        self.expect_srcs(srcs)
        self.vocab = read_vocab(
            self, self.conf.char_rnn_conf.vocab_path, "char_rnn_conf.vocab_path"
        )
        src = srcs[0].data
        if src is None or src.ndim == 0 or src.shape[0] == 0:
            raise self.error(
                f"layer '{self.name}': source '{srcs[0].name}' has no data",
                field="srclayers",
                help="give it a source layer that outputs data",
            )
        self._idx = self.xp.empty(src.shape[0], dtype=np.int64)
        self._pending_newline = False
        self.text: list[str] = []  # everything printed, for programs that drive the layer

    def forward(self, phase, srcs):
        x = srcs[0].data
        col = x.reshape(x.shape[0], -1)[:, 0]
        np.copyto(self._idx, col, casting="unsafe")
        n = len(self.vocab)
        if self._idx.min() < 0 or self._idx.max() >= n:
            bad = int(self._idx[(self._idx < 0) | (self._idx >= n)][0])
            raise self.error(
                f"layer '{self.name}': index {bad} from '{srcs[0].name}' is outside the "
                f"vocabulary of {n} characters",
                field="char_rnn_conf.vocab_path",
                help="the vocabulary must be the one the model was trained with",
            )
        chars = "".join(self.vocab[i] for i in self._idx)
        self.text.append(chars)
        sys.stdout.write(chars)
        sys.stdout.flush()
        self._pending_newline = not chars.endswith("\n")

    def close(self) -> None:
        if self._pending_newline:
            sys.stdout.write("\n")
            sys.stdout.flush()
            self._pending_newline = False
