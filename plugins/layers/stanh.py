"""kSTanh: scaled tanh, ``y = 1.7159047·tanh(0.66666667·x)`` (SINGA 0.3 §2.3, LeCun's tanh).

Backward uses the output only: ``gx = g·(0.66666667·1.7159047 − (0.66666667/1.7159047)·y²)``.
"""

from __future__ import annotations

import numpy as np
from singa_builtins.layers._bias import define_bias_activation

from singa_core.cuda import elementwise_kernel
from singa_core.kernels import define_kernel
from singa_core.layer import AbsorbsBias, NeuronLayer
from singa_core.memory import charge as charge_memory
from singa_core.sequences import RowIndependent

STANH_A = 1.7159047
STANH_B = 0.66666667
_AB = STANH_A * STANH_B
_B_OVER_A = STANH_B / STANH_A


def stanh_forward(x: np.ndarray, out: np.ndarray) -> None:
    np.multiply(x, STANH_B, out=out)
    np.tanh(out, out=out)
    np.multiply(out, STANH_A, out=out)


def stanh_backward(y: np.ndarray, g: np.ndarray, out: np.ndarray, scratch: np.ndarray) -> None:
    """``out = g·(A·B − (B/A)·y²)``; ``scratch`` has y's shape (may not alias y, g or out)."""
    np.multiply(y, y, out=scratch)
    scratch *= -_B_OVER_A
    scratch += _AB
    np.multiply(g, scratch, out=out)


_F = {k: repr(float(np.float32(v))) + "f" for k, v in
      {"A": STANH_A, "B": STANH_B, "AB": _AB, "BA": _B_OVER_A}.items()}  # fmt: skip

define_kernel(
    "stanh_forward",
    host=stanh_forward,
    generic=stanh_forward,
    cuda=elementwise_kernel(
        "singa_stanh_forward",
        "const float* x, float* y",
        f"y[i] = tanhf(x[i] * {_F['B']}) * {_F['A']};",
        stanh_forward,
    ),
    doc="y = 1.7159047·tanh(0.66666667·x)",
)
define_kernel(
    "stanh_backward",
    host=stanh_backward,
    generic=stanh_backward,
    cuda=elementwise_kernel(
        "singa_stanh_backward",
        "const float* y, const float* g, float* out",
        f"const float v = y[i]; out[i] = g[i] * (v * v * -{_F['BA']} + {_F['AB']});",
        stanh_backward,
        pick=lambda y, g, out, scratch: (y, g, out),
    ),
    doc="out = g·(A·B − (B/A)·y²)",
)
define_bias_activation(
    "stanh", stanh_forward, f"tanhf(v * {_F['B']}) * {_F['A']}", "y = 1.7159047·tanh(0.66666667·x)"
)


class STanhLayer(RowIndependent, AbsorbsBias, NeuronLayer):
    type_names = ("kSTanh",)
    placement = "device"

    def setup(self, srcs):
        self.expect_srcs(srcs)
        self.alloc_like(srcs[0].data)
        charge_memory(
            self, "scratch", self.data.shape, what="backward's work buffer", training_only=True
        )
        self._scratch = np.empty_like(self.data)

    def to_onnx(self, g, inputs):
        return stanh_onnx(g, inputs[0], self.name)

    def forward(self, phase, srcs):
        if self.absorbed_bias is None:
            self.kernels.stanh_forward(srcs[0].data, self.data)
        else:  # the source's bias, added in the same launch (AbsorbsBias)
            self.kernels.bias_stanh_forward(srcs[0].data, self.absorbed_bias.value, self.data)

    def backward(self, phase, srcs):
        buf = srcs[0].grad_for(self)
        if buf is not None:
            self.kernels.stanh_backward(self.data, self.grad, buf, self._scratch)


def stanh_onnx(g, x: str, name: str) -> str:
    """``1.7159047·tanh(0.66666667·x)`` as ONNX nodes."""
    inner = g.add("Mul", [x, g.const(np.float32(STANH_B), f"{name}/b")], name=f"{name}/bx")
    t = g.add("Tanh", [inner], name=f"{name}/tanh")
    return g.add("Mul", [t, g.const(np.float32(STANH_A), f"{name}/a")], name=name)
