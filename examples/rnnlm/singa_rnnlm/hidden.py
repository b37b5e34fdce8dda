"""kHidden: 0.3's rnnlm HiddenLayer, a sigmoid recurrent layer run over one window.

Param 0 is ``W``, ``(word_dim, word_dim)`` (the source's width). For the slots
``t < window`` of the source (kEmbedding's vectors ``x_t``)::

    h_0 = sigmoid(x_0),    h_t = sigmoid(h_{t-1} W + x_t)      (row vectors, no bias)

Every window starts afresh from ``h_0`` (0.3 carried no state from one window to the next).
Backward is back-propagation through time within the window: with ``d_t`` the gradient of
the loss with respect to the pre-activation of ``h_t``,

    d_t = (grad[t] + d_{t+1} W^T) ⊙ h_t ⊙ (1 − h_t)     (no d_{t+1} term for the last slot)
    W.grad = Σ_{t≥1} h_{t-1}^T d_t,    source grad[t] = d_t

``W.grad`` is overwritten, or added to under ``kAggGrad``. The same equations as 0.3's
(which overwrote the layer's own ``grad`` buffer with ``d``; here ``grad`` is left as the
consumers wrote it).
"""

from __future__ import annotations

import numpy as np
from singa_core.layer import NeuronLayer, kAggGrad
from singa_core.param import DTYPE

from singa_rnnlm._common import window_source


def sigmoid(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``1 / (1 + exp(-x))`` into ``out`` without overflow warnings."""
    np.negative(x, out=out)
    np.clip(out, -80.0, 80.0, out=out)
    np.exp(out, out=out)
    out += 1.0
    np.reciprocal(out, out=out)
    return out


class RnnlmHiddenLayer(NeuronLayer):
    type_names = ("kHidden",)

    def setup(self, srcs):
        self.expect_srcs(srcs)
        src = window_source(self, srcs[0])
        rows, dim = src.data.shape
        self.alloc((rows, dim))
        self.weight = self.create_param(0, (dim, dim), "weight")
        self.window = 0
        self._pre = np.zeros((rows, dim), dtype=DTYPE)  # d_t of the last backward
        self._row = np.zeros(dim, dtype=DTYPE)

    def forward(self, phase, srcs):
        src = srcs[0]
        w = self.window = src.window
        x, h, W = src.data, self.data, self.weight.value
        if w:
            sigmoid(x[0], h[0])
        pre = self._row
        for t in range(1, w):
            np.dot(h[t - 1], W, out=pre)
            pre += x[t]
            sigmoid(pre, h[t])

    def backward(self, phase, srcs):
        w = self.window
        h, d, W = self.data, self._pre, self.weight.value
        carry = self._row
        for t in range(w - 1, -1, -1):
            if t < w - 1:
                np.dot(d[t + 1], W.T, out=carry)
                np.add(self.grad[t], carry, out=d[t])
            else:
                d[t] = self.grad[t]
            d[t] *= h[t]
            d[t] *= 1.0 - h[t]
        gw = self.weight.grad
        if w > 1:
            if phase & kAggGrad:
                gw += h[: w - 1].T @ d[1:w]
            else:
                np.dot(h[: w - 1].T, d[1:w], out=gw)
        elif not phase & kAggGrad:
            gw.fill(0.0)
        g = srcs[0].grad_for(self)
        if g is not None:
            g[:w] = d[:w]
            g[w:] = 0.0
