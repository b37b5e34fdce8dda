"""kInnerProduct: a fully connected layer (SINGA 0.3 §2.3, neuron_layer/inner_product.cc).

The source is flattened to ``(B, vdim)`` with ``vdim = src.count / B``; the output is
``(B, hdim)`` with ``hdim = innerproduct_conf.num_output`` (divided by the number of
partitions when the layer is partitioned on dimension 1, i.e. ``partition_dim > 0``).

* param 0, the weight: ``(hdim, vdim)`` (SINGA's ``(out, in)``), or ``(vdim, hdim)`` with
  ``transpose: true``; param 1, the bias: ``(hdim,)``. Both must be configured (0.3 always
  creates the bias, ``bias_term`` is unused).
* forward: ``y = x·Wᵀ + b`` (``y = x·W + b`` transposed); on a device, an activation that
  alone reads ``y`` adds ``b`` in its own launch (``bias_to_defer``; ``y`` ends the same);
* backward: ``gW = gᵀ·x`` (``xᵀ·g``), ``gb = Σ_rows g``, ``gx = g·W`` (``g·Wᵀ``); with the
  ``kAggGrad`` phase flag (BPTT) the param gradients are accumulated instead of overwritten.
  The source gradient is skipped when the source takes none (``grad_for`` returns None).
"""

from __future__ import annotations

import numpy as np

from singa_core.blas import gemm, gemm_acc
from singa_core.layer import DefersBias, NeuronLayer, kAggGrad, kDeploy, partitioned_size
from singa_core.param import DTYPE
from singa_core.sequences import RowIndependent


class InnerProductLayer(RowIndependent, DefersBias, NeuronLayer):
    type_names = ("kInnerProduct",)
    placement = "device"
    needs_whole_source = True  # partitioned on dim 1, each part reads all of src

    def setup(self, srcs):
        self.expect_srcs(srcs)
        conf = self.conf.innerproduct_conf
        if not self.conf.HasField("innerproduct_conf") or not conf.HasField("num_output"):
            raise self.error(
                f"layer '{self.name}' (kInnerProduct) needs innerproduct_conf.num_output",
                field="innerproduct_conf",
                help="add `innerproduct_conf { num_output: N }`",
            )
        hdim = int(conf.num_output)
        hdim = partitioned_size(self, hdim, "num_output")
        if hdim <= 0:
            raise self.error(
                f"layer '{self.name}': num_output must be positive, got {conf.num_output}",
                field="innerproduct_conf.num_output",
                help="set num_output to the number of output units, e.g. 10",
            )
        src = srcs[0].data
        if src is None or src.ndim == 0 or src.shape[0] == 0:
            raise self.error(
                f"layer '{self.name}': source '{srcs[0].name}' has no data to connect to",
                field="srclayers",
                help="give it a source layer that outputs data",
            )
        self.batchsize = int(src.shape[0])
        self.vdim = int(src.size // self.batchsize)
        self.hdim = hdim
        self.transpose = bool(conf.transpose)
        self.alloc((self.batchsize, hdim))
        wshape = (self.vdim, hdim) if self.transpose else (hdim, self.vdim)
        self.weight = self.create_param(0, wshape, "weight")
        self.bias = self.create_param(1, (hdim,), "bias")
        # sum over rows as a GEMV with a ones vector (faster than ndarray.sum for float32)
        self._ones = self.xp.ones(self.batchsize, dtype=DTYPE)
        # predicting passes of up to 128 rows: OpenBLAS multiplies W·xᵀ 10-16% faster than
        # x·Wᵀ for so few rows (benchmarks/predict.py; slower for many rows)
        small = self.ctx.phase & kDeploy and not self.transpose and self.batchsize <= 128
        self._yt = self.xp.empty((hdim, self.batchsize), dtype=DTYPE) if small else None

    def to_onnx(self, g, inputs):
        x = g.reshape(inputs[0], (self.vdim,), f"{self.name}/flat")
        w, b = g.param(self.weight), g.param(self.bias)
        # singa keeps the weight (out, in), or (in, out) with transpose: y = x·Wᵀ + b
        return g.add("Gemm", [x, w, b], name=self.name, transB=0 if self.transpose else 1)

    def bias_to_defer(self):
        # on a device its consumer may add the bias in its own launch (AbsorbsBias);
        # not on the few-row predicting path, whose add is also the transposing copy
        return self.bias if self._yt is None else None

    def forward(self, phase, srcs):
        x = srcs[0].data.reshape(self.batchsize, self.vdim)
        w = self.weight.value
        if self._yt is not None:  # predicting a few rows: (W·xᵀ)ᵀ, see setup
            np.dot(w, x.T, out=self._yt)
            np.add(self._yt.T, self.bias.value, out=self.data)
            return
        gemm(x, w if self.transpose else w.T, self.data)  # x·Wᵀ: see blas.FEW_ROWS
        if self.deferred_bias is None:  # else its consumer adds it (bias_to_defer)
            self.data += self.bias.value

    def flops(self, srcs):
        mm = 2.0 * self.batchsize * self.vdim * self.hdim  # one (B x V)·(V x H) product
        bias = float(self.batchsize * self.hdim)
        src_grad = mm if srcs[0].grad_for(self) is not None else 0.0
        return mm + bias, mm + bias + src_grad  # backward: weight and bias (+ source) grads

    def backward(self, phase, srcs):
        src = srcs[0]
        g = self.grad
        x = src.data.reshape(self.batchsize, self.vdim)
        w = self.weight.value
        wp, bp = self.weight, self.bias
        buf = src.grad_for(self)
        if buf is not None:  # first: the weights may be updated by their gradient's GEMM
            wx = w.T if self.transpose else w
            if buf.flags.c_contiguous:
                gemm(g, wx, buf.reshape(self.batchsize, self.vdim))
            else:  # a strided view: reshape would copy, so compute aside and assign
                if getattr(self, "_gx", None) is None:  # made by the first step, reused
                    self._gx = self.xp.empty((self.batchsize, self.vdim), dtype=DTYPE)
                gemm(g, wx, self._gx)
                buf[...] = self._gx.reshape(buf.shape)
        if phase & kAggGrad:  # add into the gradients in place (beta = 1 GEMMs)
            gemm_acc(x.T, g, wp.grad) if self.transpose else gemm_acc(g.T, x, wp.grad)
            gemm_acc(self._ones[None, :], g, bp.grad.reshape(1, -1))
        else:  # (plain SGD's update may be folded into these: Param.set_grad_product)
            wp.set_grad_product(x.T, g) if self.transpose else wp.set_grad_product(g.T, x)
            bp.set_grad_product(self._ones[None, :], g)
