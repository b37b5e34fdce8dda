"""Pooling shared by kPooling and kCPooling (SINGA 0.3 §2.3).

Input ``[B, C, H, W]`` (3-D: one channel), output ``[B, C, oH, oW]`` with SINGA's floor
rule ``oH = (H + 2·pad_h − kh) // stride_h + 1`` (CIFAR-10's 32 → 15 for k3 s2).

* MAX: the window maximum (padding never wins); backward routes each output's gradient to
  the *first* maximal input of its window in row-major order (Caffe's argmax), for both
  types;
* AVG: the window sum divided by ``kh·kw``. Under the floor rule every window lies inside
  the padded input, so this equals Caffe's "count including padding" divisor; backward
  spreads ``g / (kh·kw)`` over the window.

Implementation (batch-innermost layout, see ``_window.py``): one pass per kernel offset
over a strided block of the input — a running maximum that records the winning offset
with a strict ``>`` (so the first maximum wins), or a running sum. Backward adds each
offset's share back (``g·[argmax = k]``, written directly when windows do not overlap).
Everything is branchless: masked assignments are several times slower on random masks.
The winning offsets are only recorded in training. With numba installed (the ``fast``
extra) the same computation runs as compiled one-pass kernels (``_pool_kernels.py``);
``SINGA_NUMBA=0`` keeps the numpy path.
"""

from __future__ import annotations

import numpy as np
from singa_builtins.layers._pool_kernels import kernels as pool_kernels
from singa_builtins.layers._window import (
    Window,
    as_chwn,
    batch_innermost,
    check_output_size,
    padded_copy,
    spatial_input,
    window_from_conf,
    window_launch_args,
    window_slice,
)

from singa_core.cuda import BLOCK, CUPY, grid_for
from singa_core.kernels import define_kernel
from singa_core.layer import NeuronLayer, kTrain
from singa_core.memory import charge as charge_memory
from singa_core.memory import charge_numba
from singa_core.param import DTYPE
from singa_core.schema import job_pb2

MAX, AVG = job_pb2.PoolingProto.MAX, job_pb2.PoolingProto.AVG


# -- one launch each way on a GPU (the kernels ``pool_forward`` / ``pool_backward``) --------
def pool_forward_host(x, out, argmax, kh, kw, ph, pw, sh, sw, method, record) -> None:
    """Pool the CHWN view ``x`` (unpadded, any strides) into ``out`` (C, oH, oW, B); MAX
    records each output's first maximal window offset in ``argmax`` when ``record``."""
    oh, ow = out.shape[1], out.shape[2]
    xp = padded_copy(x, ph, pw, -np.inf if method == MAX else 0.0)
    win = Window(kh, kw, ph, pw, sh, sw)
    slices = [window_slice(win, i, j, oh, ow) for i, j in win.positions]
    np.copyto(out, xp[slices[0]])
    if method == AVG:
        for sl in slices[1:]:
            out += xp[sl]
        out *= DTYPE(1.0 / (kh * kw))
        return
    if record:
        argmax.fill(0)
    for k, sl in enumerate(slices[1:], start=1):
        if record:
            argmax[xp[sl] > out] = k
        np.maximum(out, xp[sl], out=out)


def pool_backward_host(g, argmax, target, kh, kw, ph, pw, sh, sw, method) -> None:
    """The source gradient into the CHWN view ``target`` (unpadded, any strides): each
    output's gradient to its window's first maximum (MAX) or spread over its window
    (AVG), summed in window-offset order."""
    c, h, w, b = target.shape
    _, oh, ow, _ = g.shape
    gxp = np.zeros((c, h + 2 * ph, w + 2 * pw, b), dtype=DTYPE)
    win = Window(kh, kw, ph, pw, sh, sw)
    inv = DTYPE(1.0 / (kh * kw))
    for k, (i, j) in enumerate(win.positions):
        sl = window_slice(win, i, j, oh, ow)
        gxp[sl] += g * (argmax == k) if method == MAX else g * inv
    np.copyto(target, gxp[:, ph : ph + h, pw : pw + w])


NEG_INF = "(-__int_as_float(0x7f800000))"  # -inf in CUDA C without math headers

_POOL_ARGS = (
    "int C, int H, int W, int B, int OH, int OW, int kh, int kw, int ph, int pw, int sh, "
    "int sw, long long sc, long long sh_, long long sw_, long long sb"
)

_POOL_FORWARD = f"""
extern "C" __global__ void singa_pool_forward(const float* __restrict__ x,
    float* __restrict__ out, unsigned char* __restrict__ argmax, {_POOL_ARGS}, int avg,
    int record, float inv) {{
  const long long n = (long long)C * OH * OW * B;
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += stride) {{
    const int b = (int)(e % B);
    const int ow = (int)((e / B) % OW);
    const int oh = (int)((e / ((long long)B * OW)) % OH);
    const int c = (int)(e / ((long long)B * OW * OH));
    float best = avg ? 0.0f : {NEG_INF};
    int arg = 0;
    for (int i = 0; i < kh; ++i) {{
      const int hh = oh * sh + i - ph;
      for (int j = 0; j < kw; ++j) {{
        const int ww = ow * sw + j - pw;
        const bool inside = hh >= 0 && hh < H && ww >= 0 && ww < W;
        const float pad = avg ? 0.0f : {NEG_INF};
        const float v = inside ? x[c * sc + hh * sh_ + ww * sw_ + b * sb] : pad;
        if (avg) {{
          best = (i == 0 && j == 0) ? v : best + v;
        }} else if (v != v) {{
          best = v;
        }} else if (v > best) {{
          best = v;
          arg = i * kw + j;
        }}
      }}
    }}
    out[e] = avg ? best * inv : best;
    if (record && !avg) argmax[e] = (unsigned char)arg;
  }}
}}
"""

_POOL_BACKWARD = f"""
extern "C" __global__ void singa_pool_backward(const float* __restrict__ g,
    const unsigned char* __restrict__ argmax, float* __restrict__ target, {_POOL_ARGS},
    int avg, float inv) {{
  const long long n = (long long)C * H * W * B;
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += stride) {{
    const int b = (int)(e % B);
    const int w = (int)((e / B) % W);
    const int h = (int)((e / ((long long)B * W)) % H);
    const int c = (int)(e / ((long long)B * W * H));
    float s = 0.0f;
    for (int i = 0; i < kh; ++i) {{
      const int ty = h + ph - i;
      if (ty < 0 || ty % sh != 0 || ty / sh >= OH) continue;
      const int oh = ty / sh;
      for (int j = 0; j < kw; ++j) {{
        const int tx = w + pw - j;
        if (tx < 0 || tx % sw != 0 || tx / sw >= OW) continue;
        const int ow = tx / sw;
        const long long o = (((long long)c * OH + oh) * OW + ow) * B + b;
        if (avg) s += g[o] * inv;
        else if (argmax[o] == i * kw + j) s += g[o];
      }}
    }}
    target[c * sc + h * sh_ + w * sw_ + b * sb] = s;
  }}
}}
"""


def pool_forward_cuda(x, out, argmax, kh, kw, ph, pw, sh, sw, method, record, rt=CUPY):
    geometry = window_launch_args(x, out.shape[1], out.shape[2], kh, kw, ph, pw, sh, sw)
    rt.kernel(_POOL_FORWARD, "singa_pool_forward")(
        grid_for(out.size),
        BLOCK,
        (x, out, argmax, *geometry, np.int32(method == AVG), np.int32(bool(record)),
         np.float32(1.0 / (kh * kw))),
    )  # fmt: skip


def pool_backward_cuda(g, argmax, target, kh, kw, ph, pw, sh, sw, method, rt=CUPY):
    geometry = window_launch_args(target, g.shape[1], g.shape[2], kh, kw, ph, pw, sh, sw)
    rt.kernel(_POOL_BACKWARD, "singa_pool_backward")(
        grid_for(target.size),
        BLOCK,
        (g, argmax, target, *geometry, np.int32(method == AVG),
         np.float32(1.0 / (kh * kw))),
    )  # fmt: skip


define_kernel(
    "pool_forward",
    host=pool_forward_host,
    cuda=pool_forward_cuda,
    doc="max or average pooling of a CHWN batch, argmax recorded (one launch on a GPU)",
)
define_kernel(
    "pool_backward",
    host=pool_backward_host,
    cuda=pool_backward_cuda,
    doc="pooling's source gradient, gathered per input element (one launch on a GPU)",
)


class PoolingBase(NeuronLayer):
    #: kPooling (mshadow) uses the ``_x`` kernel/pad/stride for both axes
    square: bool = False

    def setup(self, srcs):
        self.expect_srcs(srcs)
        conf = self.conf.pooling_conf
        self.method = int(conf.pool)
        if self.method not in (MAX, AVG):
            raise self.error(
                f"layer '{self.name}': unknown pooling method {self.method}",
                field="pooling_conf",
                help="use `pool: MAX` or `pool: AVG`",
            )
        self.win = win = window_from_conf(self, conf, "pooling_conf", square=self.square)
        b, c, h, w = spatial_input(self, srcs[0])
        oh, ow = check_output_size(self, win, h, w, "pooling_conf")
        self.batchsize, self.channels, self.height, self.width = b, c, h, w
        self.out_h, self.out_w = oh, ow
        self._out, self.data = batch_innermost(c, oh, ow, b, layer=self)
        self._gout, self.grad = batch_innermost(c, oh, ow, b, layer=self, kind="grad")
        self._padded = win.ph > 0 or win.pw > 0
        fill = -np.inf if self.method == MAX else 0.0
        hp, wp = h + 2 * win.ph, w + 2 * win.pw
        self._slices = [window_slice(win, i, j, oh, ow) for i, j in win.positions]
        if len(self._slices) > 255:
            raise self.error(
                f"layer '{self.name}': pooling windows of more than 255 elements are not "
                f"supported (got {win.kh}x{win.kw})",
                field="pooling_conf",
                help="use a window of at most 255 elements (kernel_h x kernel_w); stack two "
                "pooling layers for a larger one",
            )
        # one launch each way where the device asks for it (a GPU), else the host's paths:
        # compiled one-pass kernels (numba), or numpy's
        self._one_launch = self.kernels.window_kernels()
        if self._one_launch:
            self._out4 = self._out
            self._argmax = self._buffer(
                (c, oh, ow, b), np.uint8, "argmax", self.method == MAX, zero=True
            )
            if self._argmax is None:
                self._argmax = self.xp.zeros(1, dtype=np.uint8)
            return
        self._kernels = pool_kernels()
        if self._kernels is not None:  # their first call loads numba's compiler
            charge_numba(self)
        # non-overlapping windows (stride >= kernel), and whether they cover the input
        self._tiles = win.sh >= win.kh and win.sw >= win.kw
        self._covers = self._tiles and oh * win.sh == hp and ow * win.sw == wp
        # the work buffers of the path this layer runs, and only those; all but the padded
        # input are written by training passes alone (see singa_core.memory)
        self._xp = self._gxp = None
        if self._padded:
            charge_memory(self, "scratch", (c, hp, wp, b), what="padded input")
            self._xp = self.xp.full((c, hp, wp, b), fill, dtype=DTYPE)
            src_grad = srcs[0].grad_for(self) is not None
            self._gxp = self._buffer(
                (c, hp, wp, b), DTYPE, "padded input gradient", src_grad, zero=True
            )
        out = (c, oh, ow, b)
        numpy_path = self._kernels is None
        # the offset of each output's maximum, recorded by a training forward
        self._argmax = self._buffer(out, np.uint8, "argmax", self.method == MAX, zero=True)
        # numpy path: max's comparison masks (forward and backward), and backward's scaled
        # gradient where windows overlap or average
        self._mask = self._buffer(out, bool, "max mask", numpy_path and self.method == MAX)
        self._kmask = self._buffer(out, np.uint8, "max offsets", numpy_path and self.method == MAX)
        scaled = numpy_path and not (self._tiles and self.method == MAX)
        self._scaled = self._buffer(out, DTYPE, "scaled gradient", scaled)
        self._inv_count = DTYPE(1.0 / (win.kh * win.kw))

    def _buffer(self, shape, dtype, what: str, needed: bool = True, zero: bool = False):
        """A training-only work buffer (charged first), or None where not ``needed``."""
        if not needed:
            return None
        charge_memory(
            self,
            "scratch",
            shape,
            itemsize=np.dtype(dtype).itemsize,
            what=what,
            training_only=True,
        )
        return (self.xp.zeros if zero else self.xp.empty)(shape, dtype=dtype)

    def _input_chwn(self, x: np.ndarray) -> np.ndarray:
        xc = as_chwn(x, self.batchsize, self.channels, self.height, self.width)
        if not self._padded:
            return xc
        win = self.win
        np.copyto(self._xp[:, win.ph : win.ph + self.height, win.pw : win.pw + self.width], xc)
        return self._xp

    def to_onnx(self, g, inputs):
        win = self.win
        x = g.reshape(inputs[0], (self.channels, self.height, self.width), f"{self.name}/nchw")
        window = dict(
            kernel_shape=[win.kh, win.kw],
            pads=[win.ph, win.pw, win.ph, win.pw],
            strides=[win.sh, win.sw],
        )
        if self.method == MAX:  # padding is -inf to MaxPool: it never wins, as here
            return g.add("MaxPool", [x], name=self.name, **window)
        # floor mode: every window lies in the padded input, divisor kh·kw
        return g.add("AveragePool", [x], name=self.name, count_include_pad=1, **window)

    def _window_args(self) -> tuple:
        w = self.win
        return (w.kh, w.kw, w.ph, w.pw, w.sh, w.sw, self.method)

    def forward(self, phase, srcs):
        if self._one_launch:
            x = as_chwn(srcs[0].data, self.batchsize, self.channels, self.height, self.width)
            record = bool(phase & kTrain) and self.method == MAX
            self.kernels.pool_forward(x, self._out, self._argmax, *self._window_args(), record)
            return
        xp = self._input_chwn(srcs[0].data)
        out, slices = self._out, self._slices
        fast, win = self._kernels, self.win
        if fast is not None:
            if self.method == AVG:
                fast.avg_forward(xp, win.kh, win.kw, win.sh, win.sw, self._inv_count, out)
            else:
                record = bool(phase & kTrain)
                fast.max_forward(xp, win.kh, win.kw, win.sh, win.sw, out, self._argmax, record)
            return
        np.copyto(out, xp[slices[0]])
        if self.method == AVG:
            for sl in slices[1:]:
                out += xp[sl]
            out *= self._inv_count
        elif phase & kTrain:
            # offsets are visited in increasing order, so "arg = k where x > max" is
            # arg = max(arg, k·[x > max]): branchless, unlike a masked assignment
            arg, mask, kmask = self._argmax, self._mask, self._kmask
            arg.fill(0)
            for k, sl in enumerate(slices[1:], start=1):
                np.greater(xp[sl], out, out=mask)
                np.multiply(mask, np.uint8(k), out=kmask)
                np.maximum(arg, kmask, out=arg)
                np.maximum(out, xp[sl], out=out)
        else:
            for sl in slices[1:]:
                np.maximum(out, xp[sl], out=out)

    def flops(self, srcs):
        # one comparison (max) or addition (average) per window element and output
        ops = float(self.channels * self.out_h * self.out_w * self.batchsize * len(self._slices))
        return ops, ops if srcs[0].grad_for(self) is not None else 0.0

    def backward(self, phase, srcs):
        buf = srcs[0].grad_for(self)
        if buf is None:
            return
        target = as_chwn(buf, self.batchsize, self.channels, self.height, self.width)
        if self._one_launch:
            self.kernels.pool_backward(self._gout, self._argmax, target, *self._window_args())
            return
        if self._padded and self._gxp is None:  # a source that took no gradient at set-up
            self._gxp = self.xp.zeros(self._xp.shape, dtype=DTYPE)
        gxp = self._gxp if self._padded else target
        g, tmp, fast, win = self._gout, self._scaled, self._kernels, self.win
        if fast is not None:
            if self.method == AVG:
                fast.avg_backward(g, win.kh, win.kw, win.sh, win.sw, self._inv_count, gxp)
            else:
                args = (win.kh, win.kw, win.sh, win.sw, self._tiles, self._covers)
                fast.max_backward(g, self._argmax, *args, gxp)
        elif self._tiles and self.method == MAX:
            # windows do not overlap: each input gets one offset's share, written directly
            if not self._covers:
                gxp.fill(0.0)
            arg, mask = self._argmax, self._mask
            for k, sl in enumerate(self._slices):
                np.equal(arg, k, out=mask)
                np.multiply(g, mask, out=gxp[sl])
        else:
            gxp.fill(0.0)
            if self.method == AVG:
                np.multiply(g, self._inv_count, out=tmp)
                for sl in self._slices:
                    gxp[sl] += tmp
            else:
                arg, mask = self._argmax, self._mask
                for k, sl in enumerate(self._slices):
                    np.equal(arg, k, out=mask)
                    np.multiply(g, mask, out=tmp)
                    gxp[sl] += tmp
        if self._padded:
            np.copyto(target, gxp[:, win.ph : win.ph + self.height, win.pw : win.pw + self.width])
