"""kSigmoid: ``y = 1/(1 + e^−x)``, ``gx = g·y·(1 − y)`` (SINGA 0.3 §2.3)."""

from __future__ import annotations

import numpy as np
from singa_builtins.layers import _exp_passes
from singa_builtins.layers._bias import define_bias_activation

from singa_core.cuda import elementwise_kernel
from singa_core.kernels import define_kernel
from singa_core.layer import AbsorbsBias, NeuronLayer
from singa_core.memory import charge as charge_memory
from singa_core.sequences import RowIndependent


def sigmoid_forward(x: np.ndarray, out: np.ndarray) -> None:
    np.negative(x, out=out)
    with np.errstate(over="ignore"):  # e^−x = inf for x < −88 gives the right limit 0
        np.exp(out, out=out)
    out += 1.0
    np.reciprocal(out, out=out)


def sigmoid_forward_host(x: np.ndarray, out: np.ndarray) -> None:
    """The host: one compiled pass with numpy's exp (the same bits, ``_exp_passes``), else
    numpy's four."""
    if not _exp_passes.sigmoid(x, out):
        sigmoid_forward(x, out)


def _bias_sigmoid_fused(x: np.ndarray, b: np.ndarray, out: np.ndarray) -> bool:
    return _exp_passes.bias_sigmoid(x, b, out)


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
    fused=_bias_sigmoid_fused,
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
