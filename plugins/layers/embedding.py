"""kEmbedding: looks up feature vectors by index (SINGA 0.3 §2.3, neuron_layer/embedding.cc).

``embedding_conf {vocab_size, feature_dim (default 100)}``; param 0 is the vocabulary matrix
``V`` of shape ``(vocab_size, feature_dim)``. The source holds ``B`` indices as floats (one
per instance, e.g. shape ``[B]`` or ``[B, 1]``), truncated to integers as 0.3's
``static_cast<int>``. Output ``(B, feature_dim)``:

* forward: ``y[i] = V[idx_i]``; an index outside ``[0, vocab_size)`` is a SingaError naming
  the layer, the index and ``vocab_size`` (0.3 read out of bounds);
* backward: ``V.grad = 0`` (kept, to accumulate, with the ``kAggGrad`` flag of BPTT), then
  ``V.grad[idx_i] += g[i]`` for every ``i`` (repeated indices add up). The indices take no
  gradient: a buffer the source offers (``grad_for``) is filled with zeros.

**Deviation**: 0.3's CPU backward then memset only the first ``B·feature_dim`` values of
``V.grad`` (also under ``kAggGrad``), so with ``kAggGrad`` the rows in that prefix lost their
accumulated gradient; here the whole matrix is zeroed exactly when ``kAggGrad`` is not set.
"""

from __future__ import annotations

import numpy as np

from singa_core.device import is_host_array, to_host
from singa_core.layer import Layer, NeuronLayer, kAggGrad
from singa_core.sequences import RowIndependent


def read_indices(layer: Layer, src: Layer, out: np.ndarray, vocab_size: int, field: str):
    """``out[:] = src.data`` truncated to integers (0.3's ``static_cast<int>``), checked to
    lie in ``[0, vocab_size)``; a SingaError naming ``layer``, the index and vocab_size
    otherwise. Returns ``out``. On a device the check reads the source's host copy
    (``host_copy()``: the input layer's batch a device copy sends) where there is one, so
    that a step reads nothing back."""
    x = src.data.reshape(out.shape)
    with np.errstate(invalid="ignore"):
        np.copyto(out, x, casting="unsafe")
    if is_host_array(x):
        _check_indices(layer, src, x, out, vocab_size, field)
        return out
    host = src.host_copy()
    host = to_host(x) if host is None else host.reshape(out.shape)
    with np.errstate(invalid="ignore"):
        _check_indices(layer, src, host, host.astype(np.int64), vocab_size, field)
    return out


def _check_indices(layer, src, x: np.ndarray, idx: np.ndarray, vocab_size: int, field: str):
    """``idx`` (``x`` truncated, on the host) within ``[0, vocab_size)`` and ``x`` finite."""
    if idx.min() >= 0 and idx.max() < vocab_size and np.isfinite(x).all():
        return
    i = int(np.flatnonzero((idx < 0) | (idx >= vocab_size) | ~np.isfinite(x))[0])
    raise layer.error(
        f"layer '{layer.name}' ({layer.type_names[0]}): index {x[i]:g} of instance {i} "
        f"(from source '{src.name}') is outside [0, {vocab_size}) (vocab_size {vocab_size})",
        field=field,
        help=f"the indices must be smaller than {field}.vocab_size",
    )


class EmbeddingLayer(RowIndependent, NeuronLayer):
    type_names = ("kEmbedding",)
    placement = "device"

    def setup(self, srcs):
        self.expect_srcs(srcs)
        conf = self.conf.embedding_conf
        self.vocab_size, self.feature_dim = int(conf.vocab_size), int(conf.feature_dim)
        if self.vocab_size <= 0 or self.feature_dim <= 0:
            raise self.error(
                f"layer '{self.name}' (kEmbedding) needs a positive embedding_conf.vocab_size "
                f"and feature_dim, got {self.vocab_size} and {self.feature_dim}",
                field="embedding_conf.vocab_size"
                if self.vocab_size <= 0
                else "embedding_conf.feature_dim",
                help="add e.g. `embedding_conf { vocab_size: 101 feature_dim: 32 }`",
            )
        src = srcs[0].data
        self.batchsize = int(src.shape[0]) if src.ndim else 0
        if self.batchsize == 0 or src.size != self.batchsize:
            raise self.error(
                f"layer '{self.name}' (kEmbedding): source '{srcs[0].name}' must hold one "
                f"index per instance, but its data has shape {tuple(src.shape)}",
                field="srclayers",
                help="connect a source with one index per instance (e.g. a kLabel layer)",
            )
        self.alloc((self.batchsize, self.feature_dim))
        self.vocab = self.create_param(0, (self.vocab_size, self.feature_dim), "vocab")
        self._idx = self.xp.empty(self.batchsize, dtype=np.int64)
        self._take_mode = {"mode": "clip"} if self.device.is_host else {}

    def to_onnx(self, g, inputs):
        idx = indices_onnx(g, inputs[0], self.name)
        return g.add("Gather", [g.param(self.vocab), idx], name=self.name, axis=0)

    def forward(self, phase, srcs):
        idx = read_indices(self, srcs[0], self._idx, self.vocab_size, "embedding_conf")
        # indices are checked: mode="clip" lets numpy's take write into out without a
        # buffer (CuPy's take has no mode, and needs none)
        np.take(self.vocab.value, idx, axis=0, out=self.data, **self._take_mode)

    def backward(self, phase, srcs):
        gv = self.vocab.grad
        if not phase & kAggGrad:
            gv.fill(0.0)
        np.add.at(gv, self._idx, self.grad)  # indices of the last forward
        buf = srcs[0].grad_for(self)
        if buf is not None:
            buf.fill(0.0)


def indices_onnx(g, x: str, name: str) -> str:
    """ONNX nodes turning a source of one index per row into an int64 vector of them."""
    flat = g.add("Reshape", [x, g.const([-1], f"{name}/flat", np.int64)], name=f"{name}/rows")
    return g.add("Cast", [flat], name=f"{name}/indices", to=7)  # int64
