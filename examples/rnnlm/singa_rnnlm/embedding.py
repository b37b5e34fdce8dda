"""kEmbedding: 0.3's rnnlm EmbeddingLayer, the word vectors of a window.

``[embedding_conf] { word_dim, vocab_size }``; param 0 is the embedding matrix ``E`` of shape
``(vocab_size, word_dim)``. The source is kData; for the slots ``t < window`` of its window,
``data[t] = E[word_t]`` (``data`` has kData's ``max_window + 1`` rows; the rows from
``window`` on are left as they are and not used).

Backward: ``E.grad`` is zeroed (kept under ``kAggGrad``), then ``E.grad[word_t] += grad[t]``
for every ``t < window``. The words take no gradient.

Difference from 0.3: 0.3 *copied* ``grad[t]`` into ``E.grad[word_t]``, so a word occurring
twice in a window kept only the gradient of its last occurrence; here they add up (the
gradient of the loss). A word index outside ``[0, vocab_size)`` is an error naming the
layer and the index (0.3 CHECK-failed).
"""

from __future__ import annotations

import numpy as np
from singa_core.layer import NeuronLayer, kAggGrad

from singa_rnnlm import rnnlm_pb2
from singa_rnnlm._common import error_at, extension, window_source


class RnnlmEmbeddingLayer(NeuronLayer):
    type_names = ("kEmbedding",)

    def setup(self, srcs):
        self.expect_srcs(srcs)
        src = window_source(self, srcs[0])
        conf = extension(
            self, rnnlm_pb2.embedding_conf, "embedding_conf", "word_dim: 15 vocab_size: 3720"
        )
        self.word_dim, self.vocab_size = int(conf.word_dim), int(conf.vocab_size)
        if self.word_dim <= 0 or self.vocab_size <= 0:
            raise error_at(
                self,
                "embedding_conf",
                f"layer '{self.name}': [embedding_conf] needs a positive word_dim and "
                f"vocab_size, got {self.word_dim} and {self.vocab_size}",
                help="0.3's example uses `word_dim: 15 vocab_size: 3720`",
            )
        if not hasattr(src, "records"):
            raise self.error(
                f"layer '{self.name}' (kEmbedding): its source '{src.name}' must be the kData "
                "layer (it reads the window's word indices)",
                field="srclayers",
            )
        self.alloc((src.data.shape[0], self.word_dim))
        self.embed = self.create_param(0, (self.vocab_size, self.word_dim), "embedding")
        self.window = 0
        self._words = np.zeros(0, dtype=np.int64)

    def forward(self, phase, srcs):
        src = srcs[0]
        w = self.window = src.window
        words = src.records[:w, 0]
        if w and (words.min() < 0 or words.max() >= self.vocab_size):
            t = int(np.flatnonzero((words < 0) | (words >= self.vocab_size))[0])
            raise error_at(
                self,
                "embedding_conf",
                f"layer '{self.name}' (kEmbedding): word index {int(words[t])} (slot {t} of "
                f"the window from '{src.name}') is outside [0, {self.vocab_size})",
                help="vocab_size must be the size of the vocabulary the data was made with "
                "(`singa data` prints it)",
            )
        self._words = words.copy()
        np.take(self.embed.value, self._words, axis=0, out=self.data[:w])

    def backward(self, phase, srcs):
        g = self.embed.grad
        if not phase & kAggGrad:
            g.fill(0.0)
        np.add.at(g, self._words, self.grad[: self.window])
