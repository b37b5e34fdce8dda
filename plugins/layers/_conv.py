"""Convolution shared by kConvolution and kCConvolution (SINGA 0.3 §2.3).

Input ``[B, C, H, W]`` (a 3-D ``[B, H, W]`` input is one channel); ``num_filters`` F
(divided by the number of partitions when ``partition_dim > 0``); output
``[B, F, oH, oW]`` with ``oH = (H + 2·pad_h − kh) // stride_h + 1`` (floor).

* param 0, the weight, ``(F, C·kh·kw)`` — columns in (channel, kernel row, kernel column)
  order, so ``fan_in = C·kh·kw`` as in 0.3 — and param 1, the bias ``(F,)``; both required;
* forward ``y[n] = W·im2col(x[n]) + b``; backward ``gW = Σ_n g[n]·im2col(x[n])ᵀ``,
  ``gb = Σ_{n,h,w} g``, ``gx[n] = col2im(Wᵀ·g[n])``; the source gradient is skipped when
  the source takes none (an input layer), which saves the most expensive part of the first
  convolution's backward.

Implementation: with the batch innermost (see ``_window.py``) im2col builds one
``(C·kh·kw, oH·oW·B)`` matrix for the whole batch, so forward and each backward product is
a single GEMM. im2col copies one strided block per kernel offset; col2im adds them back
one kernel offset at a time into a padded buffer. All buffers are allocated in ``setup``;
the column buffer is reused for ``Wᵀ·g``.
"""

from __future__ import annotations

import numpy as np
from singa_builtins.layers._window import (
    as_chwn,
    batch_innermost,
    check_output_size,
    spatial_input,
    window_from_conf,
    window_slice,
)

from singa_core.layer import NeuronLayer, kAggGrad
from singa_core.param import DTYPE


class ConvolutionBase(NeuronLayer):
    needs_whole_source = True  # partitioned on dim 1, each part reads all of src
    #: kConvolution (mshadow) uses the ``_x`` kernel/pad/stride for both axes
    square: bool = False

    def setup(self, srcs):
        self.expect_srcs(srcs)
        conf = self.conf.convolution_conf
        if not self.conf.HasField("convolution_conf") or not conf.HasField("num_filters"):
            raise self.error(
                f"layer '{self.name}' ({self.type_names[0]}) needs convolution_conf.num_filters",
                field="convolution_conf",
                help="add `convolution_conf { num_filters: 32 kernel: 5 }`",
            )
        nf = int(conf.num_filters)
        nf = self.partitioned_size(nf, "num_filters")
        if nf <= 0:
            raise self.error(
                f"layer '{self.name}': num_filters must be positive, got {conf.num_filters}",
                field="convolution_conf",
            )
        self.win = win = window_from_conf(self, conf, "convolution_conf", square=self.square)
        b, c, h, w = spatial_input(self, srcs[0])
        oh, ow = check_output_size(self, win, h, w, "convolution_conf")
        self.batchsize, self.channels, self.height, self.width = b, c, h, w
        self.num_filters, self.out_h, self.out_w = nf, oh, ow

        self._out, self.data = batch_innermost(nf, oh, ow, b)
        self._gout, self.grad = batch_innermost(nf, oh, ow, b)
        ckk = c * win.kh * win.kw
        self.weight = self.create_param(0, (nf, ckk), "weight")
        self.bias = self.create_param(1, (nf,), "bias")

        hp, wp = h + 2 * win.ph, w + 2 * win.pw
        self._padded = win.ph > 0 or win.pw > 0
        # padded input (borders stay zero) and padded input gradient, both CHWN
        self._xp = np.zeros((c, hp, wp, b), dtype=DTYPE) if self._padded else None
        self._gxp = np.zeros((c, hp, wp, b), dtype=DTYPE) if self._padded else None
        self._col = np.empty((c, win.kh, win.kw, oh, ow, b), dtype=DTYPE)
        self._col2d = self._col.reshape(ckk, oh * ow * b)
        self._out2d = self._out.reshape(nf, oh * ow * b)
        self._gout2d = self._gout.reshape(nf, oh * ow * b)
        self._ones = np.ones(oh * ow * b, dtype=DTYPE)
        self._slices = [(i, j, window_slice(win, i, j, oh, ow)) for i, j in win.positions]
        self._gw_tmp: np.ndarray | None = None

    # -- im2col / col2im ----------------------------------------------------------------
    def _input_chwn(self, x: np.ndarray) -> np.ndarray:
        """The input as a contiguous, padded CHWN array (copied unless the source is
        already batch-innermost and no padding is needed)."""
        xc = as_chwn(x, self.batchsize, self.channels, self.height, self.width)
        if not self._padded and xc.flags.c_contiguous:
            return xc
        if self._xp is None:  # an NCHW source without padding: transpose once per step
            self._xp = np.empty(xc.shape, dtype=DTYPE)
        win = self.win
        np.copyto(self._xp[:, win.ph : win.ph + self.height, win.pw : win.pw + self.width], xc)
        return self._xp

    def _im2col(self, xp: np.ndarray) -> None:
        col = self._col
        for i, j, sl in self._slices:
            np.copyto(col[:, i, j], xp[sl])

    def _col2im(self, buf: np.ndarray) -> None:
        """Sum the column gradients (in ``self._col``) into the source gradient ``buf``."""
        target = as_chwn(buf, self.batchsize, self.channels, self.height, self.width)
        gxp = self._gxp if self._padded else target
        col = self._col
        gxp.fill(0.0)
        for i, j, sl in self._slices:
            gxp[sl] += col[:, i, j]
        if self._padded:
            win = self.win
            np.copyto(target, gxp[:, win.ph : win.ph + self.height, win.pw : win.pw + self.width])

    def flops(self, srcs):
        cols = self.out_h * self.out_w * self.batchsize
        mm = 2.0 * self.num_filters * self._col2d.shape[0] * cols  # weight · column GEMM
        bias = float(self.num_filters * cols)
        src_grad = mm if srcs[0].grad_for(self) is not None else 0.0
        return mm + bias, mm + bias + src_grad

    # -- forward / backward -------------------------------------------------------------
    def forward(self, phase, srcs):
        self._im2col(self._input_chwn(srcs[0].data))
        np.dot(self.weight.value, self._col2d, out=self._out2d)
        self._out2d += self.bias.value[:, None]

    def backward(self, phase, srcs):
        wp, bp = self.weight, self.bias
        g = self._gout2d
        if phase & kAggGrad:
            if self._gw_tmp is None:
                self._gw_tmp = np.empty(wp.shape, dtype=DTYPE)
            np.dot(g, self._col2d.T, out=self._gw_tmp)
            wp.grad += self._gw_tmp
            bp.grad += np.dot(g, self._ones)
        else:
            np.dot(g, self._col2d.T, out=wp.grad)
            np.dot(g, self._ones, out=bp.grad)
        buf = srcs[0].grad_for(self)
        if buf is None:
            return
        np.dot(wp.value.T, g, out=self._col2d)  # the column buffer is free again
        self._col2im(buf)
