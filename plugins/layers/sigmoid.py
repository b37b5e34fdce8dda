"""kSigmoid: ``y = 1/(1 + e^−x)``, ``gx = g·y·(1 − y)`` (SINGA 0.3 §2.3)."""

from __future__ import annotations

import numpy as np
from singa_builtins.layers._bias import define_bias_activation
from singa_builtins.layers._host_kernels import kernels as compiled

from singa_core.cuda import elementwise_kernel
from singa_core.kernels import define_kernel
from singa_core.layer import AbsorbsBias, NeuronLayer
from singa_core.memory import charge as charge_memory
from singa_core.memory import charge_numba
from singa_core.sequences import RowIndependent


def sigmoid_forward(x: np.ndarray, out: np.ndarray) -> None:
    np.negative(x, out=out)
    with np.errstate(over="ignore"):  # e^−x = inf for x < −88 gives the right limit 0
        np.exp(out, out=out)
    out += 1.0
    np.reciprocal(out, out=out)


def _sigmoid_tail(out: np.ndarray, fast) -> None:
    """``out ← 1/(e^out + 1)``: numpy's ``exp``, then ``+ 1`` and the reciprocal in one
    compiled pass (the same float32 operations as :func:`sigmoid_forward`'s)."""
    with np.errstate(over="ignore"):
        np.exp(out, out=out)
    fast.reciprocal_plus_one(out.reshape(-1))


def sigmoid_forward_host(x: np.ndarray, out: np.ndarray) -> None:
    """:func:`sigmoid_forward` with its two passes after the ``exp`` made one compiled pass
    (``_host_kernels``) where the arrays are contiguous: the same bits."""
    fast = compiled()
    if fast is None or not (
        type(out) is np.ndarray and out.flags.c_contiguous and out.dtype == np.float32
    ):
        sigmoid_forward(x, out)
        return
    np.negative(x, out=out)
    _sigmoid_tail(out, fast)


def bias_sigmoid_forward_host(x: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """``x += b``, ``out = σ(x)`` (kernel ``bias_sigmoid_forward``'s host) in three passes
    where numpy makes five: the bias add with the negation, numpy's ``exp``, then ``+ 1``
    with the reciprocal; the compiled passes run on the BLAS's threads and compute numpy's
    float32 operations (the same bits; tested)."""
    fast = compiled()
    if fast is None or not all(
        type(a) is np.ndarray and a.flags.c_contiguous and a.dtype == np.float32
        for a in (x, b, out)
    ):
        x += b
        sigmoid_forward(x, out)
        return
    cols = b.size
    fast.bias_negate(x.reshape(-1, cols), b, out.reshape(-1, cols))
    _sigmoid_tail(out, fast)


def sigmoid_backward(y: np.ndarray, g: np.ndarray, out: np.ndarray, scratch: np.ndarray) -> None:
    """``out = g·y·(1 − y)``; ``scratch`` has y's shape (may not alias y, g or out)."""
    np.subtract(1.0, y, out=scratch)
    scratch *= y
    np.multiply(g, scratch, out=out)


define_kernel(
    "sigmoid_forward",
    host=sigmoid_forward_host,
    generic=sigmoid_forward,
    cuda=elementwise_kernel(
        "singa_sigmoid_forward",
        "const float* x, float* y",
        "y[i] = 1.0f / (expf(-x[i]) + 1.0f);",
        sigmoid_forward,
    ),
    doc="y = 1/(1 + e^−x)",
)
define_kernel(
    "sigmoid_backward",
    host=sigmoid_backward,
    generic=sigmoid_backward,
    cuda=elementwise_kernel(
        "singa_sigmoid_backward",
        "const float* y, const float* g, float* out",
        "const float v = y[i]; out[i] = g[i] * ((1.0f - v) * v);",
        sigmoid_backward,
        pick=lambda y, g, out, scratch: (y, g, out),
    ),
    doc="out = g·y·(1 − y)",
)
define_bias_activation(
    "sigmoid",
    sigmoid_forward,
    "1.0f / (expf(-v) + 1.0f)",
    "y = 1/(1 + e^−x)",
    host=bias_sigmoid_forward_host,
)


class SigmoidLayer(RowIndependent, AbsorbsBias, NeuronLayer):
    type_names = ("kSigmoid",)
    placement = "device"

    def setup(self, srcs):
        self.expect_srcs(srcs)
        self.alloc_like(srcs[0].data)
        charge_memory(
            self, "scratch", self.data.shape, what="backward's work buffer", training_only=True
        )
        self._scratch = np.empty_like(self.data)
        if self.kernels.host_jit():  # its first call loads numba's compiler
            charge_numba(self)

    def to_onnx(self, g, inputs):
        return g.add("Sigmoid", inputs, name=self.name)

    def forward(self, phase, srcs):
        if self.absorbed_bias is None:
            self.kernels.sigmoid_forward(srcs[0].data, self.data)
        else:  # the source's bias, added in the same launch (AbsorbsBias)
            self.kernels.bias_sigmoid_forward(srcs[0].data, self.absorbed_bias.value, self.data)

    def backward(self, phase, srcs):
        buf = srcs[0].grad_for(self)
        if buf is not None:
            self.kernels.sigmoid_backward(self.data, self.grad, buf, self._scratch)
