"""kActivation: an element-wise activation chosen by ``activation_conf.type`` (SINGA 0.3 §2.3).

* ``RELU`` (default): ``y = max(0, x)``, ``gx = g·[y > 0]``;
* ``SIGMOID``: ``y = 1/(1 + e^−x)``, ``gx = g·y·(1 − y)``;
* ``TANH``: ``y = tanh x``, ``gx = g·(1 − y²)``;
* ``STANH``: ``y = 1.7159047·tanh(0.66666667·x)`` with kSTanh's gradient.
  **Deviation from 0.3**: there the STANH case is commented out, so the layer logs
  "Unknow activation type" and leaves its output (and the source gradient) untouched;
  here it computes the scaled tanh like kSTanh.

``share_src_blobs: true`` makes the layer work in place as in 0.3: its output is the
source's data array (overwritten by the activation) and its gradient is the buffer the
source gives it, transformed in place in ``backward``. Every gradient is computed from the
output alone, so the in-place form gives the same values.
"""

from __future__ import annotations

import numpy as np
import singa_builtins.layers.relu  # noqa: F401  (defines relu_forward/relu_backward)
import singa_builtins.layers.sigmoid  # noqa: F401  (defines sigmoid_forward/_backward)
from singa_builtins.layers import CUDNN_ALIAS_NOTE
from singa_builtins.layers._bias import define_bias_activation
from singa_builtins.layers.stanh import stanh_onnx

from singa_core.cuda import elementwise_kernel
from singa_core.kernels import define_kernel
from singa_core.layer import AbsorbsBias, NeuronLayer
from singa_core.memory import charge as charge_memory
from singa_core.memory import charge_numba
from singa_core.param import DTYPE
from singa_core.schema import job_pb2
from singa_core.sequences import RowIndependent


def tanh_forward(x: np.ndarray, out: np.ndarray) -> None:
    np.tanh(x, out=out)


def tanh_backward(y: np.ndarray, g: np.ndarray, out: np.ndarray, scratch: np.ndarray) -> None:
    np.multiply(y, y, out=scratch)
    np.subtract(1.0, scratch, out=scratch)
    np.multiply(g, scratch, out=out)


define_kernel(
    "tanh_forward",
    host=tanh_forward,
    generic=tanh_forward,
    cuda=elementwise_kernel(
        "singa_tanh_forward", "const float* x, float* y", "y[i] = tanhf(x[i]);", tanh_forward
    ),
    doc="y = tanh x",
)
define_kernel(
    "tanh_backward",
    host=tanh_backward,
    generic=tanh_backward,
    cuda=elementwise_kernel(
        "singa_tanh_backward",
        "const float* y, const float* g, float* out",
        "const float v = y[i]; out[i] = g[i] * (1.0f - v * v);",
        tanh_backward,
        pick=lambda y, g, out, scratch: (y, g, out),
    ),
    doc="out = g·(1 − y²)",
)
define_bias_activation("tanh", tanh_forward, "tanhf(v)", "y = tanh x")

#: the kernels of each activation type (relu.py, sigmoid.py, stanh.py define theirs)
_FUNCS = {
    job_pb2.RELU: ("relu_forward", "relu_backward", bool),
    job_pb2.SIGMOID: ("sigmoid_forward", "sigmoid_backward", DTYPE),
    job_pb2.TANH: ("tanh_forward", "tanh_backward", DTYPE),
    job_pb2.STANH: ("stanh_forward", "stanh_backward", DTYPE),
}


class ActivationLayer(RowIndependent, AbsorbsBias, NeuronLayer):
    type_names = ("kActivation", "kCudnnActivation")
    placement = "device"
    alias_note = CUDNN_ALIAS_NOTE

    def setup(self, srcs):
        self.expect_srcs(srcs)
        kind = self.conf.activation_conf.type
        if kind not in _FUNCS:
            raise self.error(
                f"layer '{self.name}': unknown activation type {kind}",
                field="activation_conf",
                help="use one of RELU, SIGMOID, TANH, STANH",
            )
        self._fwd, self._bwd, scratch_dtype = _FUNCS[kind]
        src = srcs[0]
        if self.conf.share_src_blobs:
            self.data = src.data
            buf = src.grad_for(self)
            self.grad = buf if buf is not None else np.zeros_like(src.data)
        else:
            self.alloc_like(src.data)
        charge_memory(
            self,
            "scratch",
            self.data.shape,
            itemsize=np.dtype(scratch_dtype).itemsize,
            what="backward's work buffer",
            training_only=True,
        )
        self._scratch = np.empty_like(self.data, dtype=scratch_dtype)
        # ReLU's host kernels run compiled passes (as kReLU's): numba's compiler
        if kind == job_pb2.RELU and self.kernels.host_jit():
            charge_numba(self)

    def to_onnx(self, g, inputs):
        kind = self.conf.activation_conf.type
        if kind == job_pb2.STANH:
            return stanh_onnx(g, inputs[0], self.name)
        op = {job_pb2.RELU: "Relu", job_pb2.SIGMOID: "Sigmoid", job_pb2.TANH: "Tanh"}[kind]
        return g.add(op, inputs, name=self.name)

    def forward(self, phase, srcs):
        if self.absorbed_bias is None:
            getattr(self.kernels, self._fwd)(srcs[0].data, self.data)
        else:  # the source's bias, added in the same launch (AbsorbsBias)
            getattr(self.kernels, "bias_" + self._fwd)(
                srcs[0].data, self.absorbed_bias.value, self.data
            )

    def backward(self, phase, srcs):
        buf = srcs[0].grad_for(self)
        if buf is not None:
            getattr(self.kernels, self._bwd)(self.data, self.grad, buf, self._scratch)
