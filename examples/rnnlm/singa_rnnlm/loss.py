"""kLoss: 0.3's rnnlm LossLayer, a softmax over word classes, then over the class's words.

``srclayers: [hidden, data]``; ``[loss_conf] { nclass, vocab_size }``; param 0 is the word
weight matrix ``U`` ``(vocab_size, dim)``, param 1 the class weight matrix ``C``
``(nclass, dim)`` (``dim``: the hidden layer's width). For each slot ``t < window`` the word
to predict is kData's slot ``t + 1``, with index ``w``, class ``c`` and class range
``[s, e)``; with ``h_t`` the hidden row (Mikolov's class-based factorisation)::

    P(c | h_t)    = softmax(C h_t)[c]
    P(w | c, h_t) = softmax(U[s:e] h_t)[w − s]
    −ln P(w | h_t) = −ln max(P(c | h_t) · P(w | c, h_t), FLT_MIN)

``self.loss`` is the sum of ``−ln P`` over the window: backward computes its gradient
(softmax minus one-hot, for the class and for the word part; only the rows ``s .. e−1`` of
``U`` get a gradient). ``U.grad`` and ``C.grad`` are overwritten, or added to under
``kAggGrad``. ``data`` holds the class probabilities of the window's slots.

Reported as 0.3 did: ``loss`` = the mean of ``−ln P`` over the words since the last report,
``ppl`` = ``exp(loss)`` (0.3 wrote ``10^(−mean log10 P)``, the same number): over a
validation pass, the perplexity of the held-out words.

A word whose class range lies outside ``[0, vocab_size)`` or whose class is not below
``nclass`` is an error naming the layer and the values (0.3 CHECK-failed or read out of
bounds).
"""

from __future__ import annotations

import math

import numpy as np
from singa_core.layer import LossLayer, kAggGrad

from singa_rnnlm import rnnlm_pb2
from singa_rnnlm._common import error_at, extension, window_source

FLT_MIN = float(np.finfo(np.float32).tiny)


def softmax(z: np.ndarray) -> np.ndarray:
    """Row-wise softmax (max-subtracted) of ``z``, in place; returns ``z``."""
    z -= z.max(axis=-1, keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=-1, keepdims=True)
    return z


class RnnlmLossLayer(LossLayer):
    type_names = ("kLoss",)
    num_srclayers = (2, 2)

    def setup(self, srcs):
        self.expect_srcs(srcs)
        hidden = window_source(self, srcs[0])
        data = srcs[1]
        if not hasattr(data, "records"):
            raise self.error(
                f"layer '{self.name}' (kLoss): its second source '{data.name}' must be the "
                "kData layer (it provides the words to predict)",
                field="srclayers",
            )
        conf = extension(self, rnnlm_pb2.loss_conf, "loss_conf", "nclass: 100 vocab_size: 3720")
        self.nclass, self.vocab_size = int(conf.nclass), int(conf.vocab_size)
        if self.nclass <= 0 or self.vocab_size <= 0:
            raise error_at(
                self,
                "loss_conf",
                f"layer '{self.name}': [loss_conf] needs a positive nclass and vocab_size, "
                f"got {self.nclass} and {self.vocab_size}",
                help="0.3's example uses `nclass: 100 vocab_size: 3720`",
            )
        rows, dim = hidden.data.shape
        if data.records.shape[0] != rows:
            raise self.error(
                f"layer '{self.name}' (kLoss): '{hidden.name}' has {rows} slots but "
                f"'{data.name}' {data.records.shape[0]}",
                field="srclayers",
            )
        self.word_weight = self.create_param(0, (self.vocab_size, dim), "word_weight")
        self.class_weight = self.create_param(1, (self.nclass, dim), "class_weight")
        self.alloc((rows, self.nclass), grad=False)
        self.window = 0
        self._labels = np.zeros((0, 4), dtype=np.int64)
        self._pword: list[np.ndarray] = []
        self._nll_sum = 0.0
        self._words = 0

    def _check_labels(self, labels: np.ndarray, src) -> None:
        bad = (labels[:, 3] > self.vocab_size) | (labels[:, 1] >= self.nclass)
        if bad.any():
            t = int(np.flatnonzero(bad)[0])
            w, c, s, e = (int(v) for v in labels[t])
            raise error_at(
                self,
                "loss_conf",
                f"layer '{self.name}' (kLoss): word {w} (slot {t + 1} of the window from "
                f"'{src.name}') has class {c} with range [{s}, {e}), outside nclass "
                f"{self.nclass} / vocab_size {self.vocab_size}",
                help="nclass and vocab_size must match the data (`singa data` prints the "
                "vocabulary size and the number of classes)",
            )

    def forward(self, phase, srcs):
        hidden, data = srcs
        w = self.window = hidden.window
        h = hidden.data[:w]
        labels = self._labels = data.records[1 : w + 1].copy()
        self._check_labels(labels, data)
        pclass = self.data[:w]
        np.dot(h, self.class_weight.value.T, out=pclass)
        softmax(pclass)
        U = self.word_weight.value
        self._pword = []
        nll = 0.0
        for t in range(w):
            wid, cid, s, e = labels[t]
            pword = softmax(U[s:e] @ h[t])
            self._pword.append(pword)
            p = float(pword[wid - s]) * float(pclass[t, cid])
            nll -= math.log(max(p, FLT_MIN))
        self.loss = nll
        self._nll_sum += nll
        self._words += w

    def backward(self, phase, srcs):
        hidden = srcs[0]
        w = self.window
        h, labels = hidden.data[:w], self._labels
        dclass = self.data[:w].copy()
        dclass[np.arange(w), labels[:, 1]] -= 1.0
        agg = bool(phase & kAggGrad)
        gu, gc = self.word_weight.grad, self.class_weight.grad
        if agg:
            gc += dclass.T @ h
        else:
            np.dot(dclass.T, h, out=gc)
            gu.fill(0.0)
        gsrc = hidden.grad_for(self)
        dh = dclass @ self.class_weight.value
        U = self.word_weight.value
        for t in range(w):
            wid, _, s, e = labels[t]
            dword = self._pword[t]  # softmax - onehot, in place (forward is done with it)
            dword[wid - s] -= 1.0
            gu[s:e] += np.outer(dword, h[t])
            dh[t] += dword @ U[s:e]
        if gsrc is not None:
            gsrc[:w] = dh
            gsrc[w:] = 0.0

    def pop_metrics(self):
        """``loss`` (mean −ln P per word) and ``ppl`` since the last call."""
        if not self._words:
            return {}
        mean = self._nll_sum / self._words
        self._nll_sum, self._words = 0.0, 0
        return {"loss": mean, "ppl": math.exp(mean)}
