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

Implementation (batch innermost, see ``_window.py``). With a vertical stride of 1 and
``C·kw >= ROW_COLUMNS_MIN_K`` (every convolution of the shipped examples but the first) the
layer builds *row columns* instead of a full im2col: ``xcol[c, j, hp,
ow, b] = xpad[c, hp, j + sw·ow, b]`` holds the kw horizontal shifts of every padded input
row, and the rows ``i .. i + oH`` of that buffer are, for kernel row ``i``, a
``(C·kw, oH·oW·B)`` matrix with a leading dimension (no copy). So

* forward is kh GEMMs ``y += W_i · xcol_i`` (``W_i = W[:, :, i, :]``, K = C·kw), with the
  bias written first so that no separate pass adds it;
* the weight gradient is kh GEMMs ``gW_i = g · xcol_iᵀ``;
* the input gradient, where it moves fewer bytes for the same products
  (:func:`transposed_gradient_pays`: "same" padding, stride 1, ``2·C > F``; CIFAR-10's
  conv2), is the transposed convolution: the same construction on the output gradient
  (padded by kh−1−ph rows and kw−1−pw columns) and the flipped weight, kh GEMMs
  ``gx += Wflip_i · gcol_i`` of ``(C, F·kw)·(F·kw, H·W·B)`` written straight into the
  source gradient (in the input's buffer where the shapes agree, free after the weight
  gradient); otherwise kh GEMMs accumulating ``W_iᵀ · g`` into the rows of the input's
  buffer, then kw strided adds back into the input rows.

The buffer is kh times smaller than a full im2col matrix (C·kw·Hp·oW·B against
C·kh·kw·oH·oW·B floats), and so is the memory traffic of building and reading it; the
padding positions are written once at set-up and stay zero, so the padded input is never
copied. The GEMMs run on strided views through :func:`singa_core.blas.gemm` (cblas with a
leading dimension, beta 0 or 1). A vertical stride above 1 takes the general path: one
``(C·kh·kw, oH·oW·B)`` im2col matrix per batch, one GEMM per product, col2im by kernel
offset. So does a layer with few input channels, whose K = C·kw would be too small for
efficient GEMMs (CIFAR-10's first convolution: C·kw = 15). On the host that matrix has a
last row of ones, so the bias is a column of the weight: ``[W | b]·[col; 1]`` adds it in
the GEMM and ``g·[col; 1]ᵀ`` gives its gradient as the last column (no pass of its own
over the output or its gradient).
"""

from __future__ import annotations

import numpy as np
from singa_builtins.layers import _conv_blocks
from singa_builtins.layers._host_kernels import kernels as compiled
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

from singa_core.blas import gemm
from singa_core.cuda import BLOCK, CUPY, grid_for
from singa_core.kernels import define_kernel
from singa_core.layer import NeuronLayer, kAggGrad, partitioned_size
from singa_core.memory import charge as charge_memory
from singa_core.memory import charge_numba
from singa_core.param import DTYPE

#: the row-column path needs GEMMs with K = C·kw; below this, the full im2col (K = C·kh·kw)
#: is faster (measured: CIFAR-10's conv1, C·kw = 15, and LeNet's first, 5, lose 40-80%)
ROW_COLUMNS_MIN_K = 64


def row_column_map(kw: int, pw: int, sw: int, in_w: int, out_w: int):
    """For row columns read from an input ``in_w`` wide into ``out_w`` output columns:
    ``[(j, outs, src)]``, for each kernel column j that reads real (unpadded) input, the
    output columns ``outs`` that do and the input columns ``src`` they read (``src = j +
    sw·ow − pw``); and ``lo``, ``hi`` (int64, per j: ``outs`` as bounds, ``lo = hi`` where
    none), the compiled passes' form of the same map."""
    colmap = []
    lo, hi = np.zeros(kw, dtype=np.int64), np.zeros(kw, dtype=np.int64)
    for j in range(kw):
        first_ow = max(0, -((j - pw) // sw))  # first ow with j + sw·ow - pw >= 0
        last = min(out_w, (in_w - 1 + pw - j) // sw + 1) if in_w - 1 + pw - j >= 0 else 0
        if last <= first_ow:
            continue
        first = j + sw * first_ow - pw
        src = slice(first, first + sw * (last - first_ow - 1) + 1, sw)
        colmap.append((j, slice(first_ow, last), src))
        lo[j], hi[j] = first_ow, last
    return colmap, lo, hi


def transposed_gradient_pays(win: Window, c: int, f: int, in_hw, out_hw) -> bool:
    """Whether the row-column input gradient is the transposed convolution (see the module
    doc) rather than the products into the input's row columns: with strides of 1 and an
    output the input's size ("same" padding) both make the same products, and the
    transposed one moves fewer bytes when ``2·C > F``. A GEMM pass of the other writes
    (reads and writes, beta 1) ``C·kw`` rows and reads ``F``; one of the transposed reads
    ``F·kw`` rows and writes ``C``: ``2·C·kw + F`` against ``2·C + F·kw`` rows a pass.
    Measured at batch 100 (2 threads / 1): CIFAR-10's conv2 (C = F = 32) 6.55 → 5.35 /
    11.8 → 10.4 ms; its conv3 (C = 32, F = 64, equal bytes) 2.75 / 4.25 ms either way.
    Another output size computes over the padding too: LeNet's conv2 (no padding, 12 → 8)
    would take 3.35 ms against 1.24."""
    return (
        win.sh == 1
        and win.sw == 1
        and tuple(in_hw) == tuple(out_hw)
        and win.ph < win.kh
        and win.pw < win.kw
        and 2 * c > f
    )


def fill_row_columns(xc, col, ph: int, colmap) -> None:
    """numpy's fill of the row columns ``col[c, j, ph + h, outs, b] = xc[c, h, src, b]``
    (see :func:`row_column_map`); the compiled pass ``fill_rows`` does the same."""
    hr = slice(ph, ph + xc.shape[1])
    for j, outs, src in colmap:
        np.copyto(col[:, j, hr, outs], xc[:, :, src])


# -- one launch each on a GPU: im2col and col2im (the kernels ``im2col`` / ``col2im``) ---------
def im2col_host(x, col, kh, kw, ph, pw, sh, sw) -> None:
    """``col[c, i, j, oh, ow, b] = xpad[c, oh·sh + i, ow·sw + j, b]`` for the CHWN view
    ``x`` (unpadded, any strides; padding reads zero)."""
    oh, ow = col.shape[3], col.shape[4]
    xp = padded_copy(x, ph, pw)
    win = Window(kh, kw, ph, pw, sh, sw)
    for i, j in win.positions:
        np.copyto(col[:, i, j], xp[window_slice(win, i, j, oh, ow)])


def col2im_host(col, target, kh, kw, ph, pw, sh, sw) -> None:
    """The CHWN view ``target`` (any strides) = the column gradients summed back onto the
    inputs they were read from, in window-offset order."""
    c, h, w, b = target.shape
    oh, ow = col.shape[3], col.shape[4]
    gxp = np.zeros((c, h + 2 * ph, w + 2 * pw, b), dtype=DTYPE)
    win = Window(kh, kw, ph, pw, sh, sw)
    for i, j in win.positions:
        gxp[window_slice(win, i, j, oh, ow)] += col[:, i, j]
    np.copyto(target, gxp[:, ph : ph + h, pw : pw + w])


_GEOMETRY = (
    "int C, int H, int W, int B, int OH, int OW, int kh, int kw, int ph, int pw, int sh, "
    "int sw, long long sc, long long sy, long long sx, long long sb"
)

_IM2COL = f"""
extern "C" __global__ void singa_im2col(const float* __restrict__ x, float* __restrict__ col,
    {_GEOMETRY}) {{
  const long long n = (long long)C * kh * kw * OH * OW * B;
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += stride) {{
    long long r = e;
    const int b = (int)(r % B); r /= B;
    const int ow = (int)(r % OW); r /= OW;
    const int oh = (int)(r % OH); r /= OH;
    const int j = (int)(r % kw); r /= kw;
    const int i = (int)(r % kh);
    const int c = (int)(r / kh);
    const int hh = oh * sh + i - ph;
    const int ww = ow * sw + j - pw;
    col[e] = (hh >= 0 && hh < H && ww >= 0 && ww < W)
        ? x[c * sc + hh * sy + ww * sx + b * sb] : 0.0f;
  }}
}}
"""

_COL2IM = f"""
extern "C" __global__ void singa_col2im(const float* __restrict__ col,
    float* __restrict__ target, {_GEOMETRY}) {{
  const long long n = (long long)C * H * W * B;
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += stride) {{
    long long r = e;
    const int b = (int)(r % B); r /= B;
    const int w = (int)(r % W); r /= W;
    const int h = (int)(r % H);
    const int c = (int)(r / H);
    float s = 0.0f;
    for (int i = 0; i < kh; ++i) {{
      const int ty = h + ph - i;
      if (ty < 0 || ty % sh != 0 || ty / sh >= OH) continue;
      const int oh = ty / sh;
      for (int j = 0; j < kw; ++j) {{
        const int tx = w + pw - j;
        if (tx < 0 || tx % sw != 0 || tx / sw >= OW) continue;
        const int ow = tx / sw;
        s += col[((((long long)c * kh + i) * kw + j) * OH + oh) * OW * B
                 + (long long)ow * B + b];
      }}
    }}
    target[c * sc + h * sy + w * sx + b * sb] = s;
  }}
}}
"""


def im2col_cuda(x, col, kh, kw, ph, pw, sh, sw, rt=CUPY) -> None:
    args = window_launch_args(x, *col.shape[3:5], kh, kw, ph, pw, sh, sw)
    rt.kernel(_IM2COL, "singa_im2col")(grid_for(col.size), BLOCK, (x, col, *args))


def col2im_cuda(col, target, kh, kw, ph, pw, sh, sw, rt=CUPY) -> None:
    args = window_launch_args(target, *col.shape[3:5], kh, kw, ph, pw, sh, sw)
    rt.kernel(_COL2IM, "singa_col2im")(grid_for(target.size), BLOCK, (col, target, *args))


define_kernel(
    "im2col",
    host=im2col_host,
    cuda=im2col_cuda,
    doc="the column matrix of a CHWN batch, padding included (one launch on a GPU)",
)
define_kernel(
    "col2im",
    host=col2im_host,
    cuda=col2im_cuda,
    doc="column gradients summed back into a CHWN batch (one launch on a GPU)",
)


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
        nf = partitioned_size(self, nf, "num_filters")
        if nf <= 0:
            raise self.error(
                f"layer '{self.name}': num_filters must be positive, got {conf.num_filters}",
                field="convolution_conf.num_filters",
                help="set num_filters to the number of output channels, e.g. 32",
            )
        self.win = win = window_from_conf(self, conf, "convolution_conf", square=self.square)
        b, c, h, w = spatial_input(self, srcs[0])
        oh, ow = check_output_size(self, win, h, w, "convolution_conf")
        self.batchsize, self.channels, self.height, self.width = b, c, h, w
        self.num_filters, self.out_h, self.out_w = nf, oh, ow

        self._out, self.data = batch_innermost(nf, oh, ow, b, layer=self)
        self._gout, self.grad = batch_innermost(nf, oh, ow, b, layer=self, kind="grad")
        ckk = c * win.kh * win.kw
        self.weight = self.create_param(0, (nf, ckk), "weight")
        self.bias = self.create_param(1, (nf,), "bias")

        self._out2d = self._out.reshape(nf, oh * ow * b)
        self._gout2d = self._gout.reshape(nf, oh * ow * b)
        self._gw_tmp: np.ndarray | None = None
        self._blocks: _conv_blocks.UnfoldedBlocks | None = None  # see _setup_im2col
        self._colx = None
        # a GPU: im2col, one GEMM, col2im, each one launch; the host: row columns where
        # they pay (see the module doc), else im2col by offset
        self._one_launch = self.kernels.window_kernels()
        self._rows = not self._one_launch and win.sh == 1 and c * win.kw >= ROW_COLUMNS_MIN_K
        # the host's im2col buffer ends with a row of ones (the bias as a column of the
        # weight: _setup_im2col); the other paths sum the bias gradient with these ones
        self._bias_row = not self._one_launch and not self._rows
        self._ones = None
        if not self._bias_row:
            charge_memory(self, "scratch", (oh * ow * b,), what="ones for the bias gradient")
            self._ones = self.xp.ones(oh * ow * b, dtype=DTYPE)
        if self._rows:
            self._setup_rows(srcs[0].grad_for(self) is not None)
        else:
            self._setup_im2col(srcs[0].data, srcs[0].grad_for(self) is not None)

    # -- row columns (vertical stride 1) ------------------------------------------------
    def _setup_rows(self, src_grad: bool) -> None:
        win, c, h, w, b = self.win, self.channels, self.height, self.width, self.batchsize
        oh, ow, nf = self.out_h, self.out_w, self.num_filters
        hp = h + 2 * win.ph
        # xcol[c, j, hp, ow, b]; padding positions are never written and stay zero
        charge_memory(self, "scratch", (c, win.kw, hp, ow, b), what="column buffer")
        self._xcol = self.xp.zeros((c, win.kw, hp, ow, b), dtype=DTYPE)
        self._xcol2d = self._xcol.reshape(c * win.kw, hp * ow * b)
        run = ow * b  # columns of one output row
        self._blocks = [self._xcol2d[:, i * run : (i + oh) * run] for i in range(win.kh)]
        # the weight (and its gradient) regrouped as (kh, F, C·kw), one 2-D block per row
        rows = (win.kh, nf, c * win.kw)
        charge_memory(self, "scratch", rows, what="weight rows")
        self._wrows = self.xp.empty(rows, dtype=DTYPE)
        charge_memory(self, "scratch", rows, what="weight gradient rows", training_only=True)
        self._gwrows = self.xp.empty(rows, dtype=DTYPE)
        # for each kernel column j: the output columns that read real (unpadded) input,
        # and the input columns they read
        self._colmap, self._col_lo, self._col_hi = row_column_map(win.kw, win.pw, win.sw, w, ow)
        self._hrows = slice(win.ph, win.ph + h)
        # the compiled passes filling the row columns and summing the input gradient back
        # (numba), or None: numpy's copies and adds
        self._compiled = compiled()
        if self._compiled is not None:  # its first call loads numba's compiler
            charge_numba(self)
        self._grad_rows = None
        if src_grad and transposed_gradient_pays(win, c, nf, (h, w), (oh, ow)):
            self._setup_transposed_rows()

    def _setup_transposed_rows(self) -> None:
        """The input gradient as the transposed convolution: the output gradient's row
        columns (padded by kh−1−ph rows and kw−1−pw columns) times the flipped weight,
        kh GEMMs of ``(C, F·kw)·(F·kw, H·W·B)`` straight into the source gradient. The
        products the other way (``Wᵢᵀ·g`` into the input's row columns, then summed back
        column shift by column shift) write C·kw rows a GEMM where these write C, and
        need a pass more."""
        win, c, h, w, b = self.win, self.channels, self.height, self.width, self.batchsize
        oh, ow, nf = self.out_h, self.out_w, self.num_filters
        qh, qw = win.kh - 1 - win.ph, win.kw - 1 - win.pw
        hq = oh + 2 * qh
        self._gmap, self._g_lo, self._g_hi = row_column_map(win.kw, qw, 1, ow, w)
        self._gq = (qh, qw)  # the output gradient's padding: rows, columns
        shape = (nf, win.kw, hq, w, b)
        same = (
            shape == self._xcol.shape
            and qh == win.ph
            and np.array_equal(self._g_lo, self._col_lo)
            and np.array_equal(self._g_hi, self._col_hi)
        )
        if same:  # "same" padding: the input's buffer, free after the weight gradient,
            # with the same padding positions (zero in both)
            self._gcol = self._xcol
        else:
            charge_memory(self, "scratch", shape, what="gradient column buffer", training_only=True)
            self._gcol = self.xp.zeros(shape, dtype=DTYPE)
        run = w * b
        gcol2d = self._gcol.reshape(nf * win.kw, hq * run)
        self._grad_rows = [gcol2d[:, i * run : (i + h) * run] for i in range(win.kh)]
        rows = (win.kh, c, nf * win.kw)
        charge_memory(self, "scratch", rows, what="flipped weight rows", training_only=True)
        self._wflip = self.xp.empty(rows, dtype=DTYPE)

    def _input_grad_transposed(self, target: np.ndarray) -> None:
        """``target`` (the contiguous CHWN source gradient) = the transposed convolution
        of the output gradient (see :meth:`_setup_transposed_rows`)."""
        win, nf, c = self.win, self.num_filters, self.channels
        g4 = self._gout  # (F, oH, oW, B), contiguous
        qh, qw = self._gq
        if self._compiled is not None:
            self._compiled.fill_rows(g4, self._gcol, qh, qw, 1, self._g_lo, self._g_hi)
        else:
            fill_row_columns(g4, self._gcol, qh, self._gmap)
        # wflip[i', c, (f, j')] = W[f, c, kh-1-i', kw-1-j']
        w4 = self.weight.value.reshape(nf, c, win.kh, win.kw)
        np.copyto(
            self._wflip.reshape(win.kh, c, nf, win.kw),
            w4[:, :, ::-1, ::-1].transpose(2, 1, 0, 3),
        )
        t2d = target.reshape(c, -1)
        for i, block in enumerate(self._grad_rows):
            gemm(self._wflip[i], block, t2d, beta=0.0 if i == 0 else 1.0)

    def _weight_rows(self) -> np.ndarray:
        """The weight as (kh, F, C·kw) (a copy, refreshed every step: values change)."""
        win = self.win
        w4 = self.weight.value.reshape(self.num_filters, self.channels, win.kh, win.kw)
        wr = self._wrows.reshape(win.kh, self.num_filters, self.channels, win.kw)
        np.copyto(wr, w4.transpose(2, 0, 1, 3))
        return self._wrows

    def _fill_rows(self, x: np.ndarray) -> None:
        xc = as_chwn(x, self.batchsize, self.channels, self.height, self.width)
        if self._compiled is not None and xc.flags.c_contiguous:  # one pass, threaded
            win = self.win
            self._compiled.fill_rows(xc, self._xcol, win.ph, win.pw, win.sw, self._col_lo,
                                     self._col_hi)  # fmt: skip
            return
        fill_row_columns(xc, self._xcol, self.win.ph, self._colmap)

    def _forward_rows(self, x: np.ndarray) -> None:
        self._fill_rows(x)
        wr, out = self._weight_rows(), self._out2d
        np.copyto(out, self.bias.value[:, None])
        for i, block in enumerate(self._blocks):
            gemm(wr[i], block, out, beta=1.0)

    def _weight_grad_rows(self, g: np.ndarray, target: np.ndarray) -> None:
        """``target (F, C·kh·kw) = Σ_n g[n]·im2col(x[n])ᵀ`` from the row columns."""
        win, gwr = self.win, self._gwrows
        for i, block in enumerate(self._blocks):
            gemm(g, block.T, gwr[i])
        g4 = gwr.reshape(win.kh, self.num_filters, self.channels, win.kw)
        np.copyto(
            target.reshape(self.num_filters, self.channels, win.kh, win.kw),
            g4.transpose(1, 2, 0, 3),
        )

    def _input_grad_rows(self, g: np.ndarray, buf: np.ndarray) -> None:
        """The source gradient: the transposed convolution where it pays
        (:func:`transposed_gradient_pays`, and a contiguous CHWN gradient), else ``Wᵢᵀ·g``
        accumulated into the rows of the column buffer (its values are no longer needed),
        then added back column shift by column shift."""
        target = as_chwn(buf, self.batchsize, self.channels, self.height, self.width)
        if self._grad_rows is not None and target.flags.c_contiguous:
            self._input_grad_transposed(target)
            return
        win, wr, col2d = self.win, self._wrows, self._xcol2d
        run = self.out_w * self.batchsize
        # rows not covered by kernel row 0 start from zero; row 0 overwrites the others
        col2d[:, self.out_h * run :] = 0.0
        for i, block in enumerate(self._blocks):
            gemm(wr[i].T, g, block, beta=0.0 if i == 0 else 1.0)
        if self._compiled is not None:  # the adds and the zeroing below in one pass
            self._compiled.rows_to_input(
                self._xcol, target, win.ph, win.pw, win.sw, self._col_lo, self._col_hi
            )
            return
        target.fill(0.0)
        col, hr = self._xcol, self._hrows
        for j, outs, src in self._colmap:
            target[:, :, src] += col[:, j, hr, outs]
        # the padding positions must be zero again for the next forward
        if win.ph > 0:
            col[:, :, : win.ph] = 0.0
            col[:, :, win.ph + self.height :] = 0.0
        if win.pw > 0 or win.sw > 1:
            for j, outs, _ in self._colmap:
                if outs.start > 0:
                    col[:, j, :, : outs.start] = 0.0
                if outs.stop < self.out_w:
                    col[:, j, :, outs.stop :] = 0.0
            for j in set(range(win.kw)) - {j for j, _, _ in self._colmap}:
                col[:, j] = 0.0

    # -- general path: full im2col (vertical stride > 1) -------------------------------
    def _setup_im2col(self, x: np.ndarray, src_grad: bool) -> None:
        win, c, h, w, b = self.win, self.channels, self.height, self.width, self.batchsize
        oh, ow = self.out_h, self.out_w
        hp, wp = h + 2 * win.ph, w + 2 * win.pw
        self._padded = win.ph > 0 or win.pw > 0
        if self._one_launch:  # the kernels read and write the source's own layout
            charge_memory(self, "scratch", (c, win.kh, win.kw, oh, ow, b), what="column buffer")
            self._col = self.xp.empty((c, win.kh, win.kw, oh, ow, b), dtype=DTYPE)
            self._col2d = self._col.reshape(c * win.kh * win.kw, oh * ow * b)
            return
        # the input as a contiguous CHWN array: padded (borders stay zero), or a copy of a
        # source that is not batch-innermost (an input layer's NCHW data); and the padded
        # input gradient, written by backward alone, where the source takes a gradient
        self._xp = self._gxp = None
        if self._padded or not as_chwn(x, b, c, h, w).flags.c_contiguous:
            what = "padded input" if self._padded else "input in CHWN order"
            charge_memory(self, "scratch", (c, hp, wp, b), what=what)
            self._xp = self.xp.zeros((c, hp, wp, b), dtype=DTYPE)
        if self._padded and src_grad:
            charge_memory(
                self, "scratch", (c, hp, wp, b), what="padded input gradient", training_only=True
            )
            self._gxp = self.xp.zeros((c, hp, wp, b), dtype=DTYPE)
        # the column buffer and a last row of ones: the forward GEMM [W | b]·[col; 1] adds
        # the bias, and the weight gradient's g·[col; 1]ᵀ gives the bias's gradient as its
        # last column, where a separate pass over the output (and one over its gradient)
        # did; K = C·kh·kw + 1 also multiplies faster here (CIFAR-10's conv1, OpenBLAS, AMD
        # EPYC, its products and passes paired: 15.0 -> 12.1-12.6 ms at 2 threads). A
        # source that takes no gradient, with a matrix too big for the cache: unfolded and
        # multiplied a block at a time instead (_conv_blocks.py), the whole never made
        ckk, cols = c * win.kh * win.kw, oh * ow * b
        if not src_grad and _conv_blocks.pays(ckk + 1, cols) and _conv_blocks.available():
            threads = _conv_blocks.pool_threads()
            shapes = _conv_blocks.UnfoldedBlocks.shapes(ckk + 1, self.num_filters, b, threads)
            charge_memory(self, "scratch", shapes[0], what="unfolded blocks, one a thread")
            charge_memory(self, "scratch", shapes[1], what="weight gradient sums, one a thread",
                          training_only=True)  # fmt: skip
            self._blocks = _conv_blocks.UnfoldedBlocks(ckk + 1, self.num_filters, b, threads)
        else:
            self._make_columns()
        charge_memory(
            self, "scratch", (2, self.num_filters, ckk + 1), what="[W | b] and its gradient"
        )
        self._wb = self.xp.empty((self.num_filters, ckk + 1), dtype=DTYPE)
        self._gwb = self.xp.empty((self.num_filters, ckk + 1), dtype=DTYPE)
        self._slices = [(i, j, window_slice(win, i, j, oh, ow)) for i, j in win.positions]
        self._compiled = compiled()  # im2col in one threaded pass (numba), or numpy's copies
        if self._compiled is not None:  # its first call loads numba's compiler
            charge_numba(self)

    def _make_columns(self) -> None:
        """The whole column matrix with its row of ones (at set-up; or at the first
        backward that finds a source gradient where set-up found none)."""
        win, c, b = self.win, self.channels, self.batchsize
        ckk, cols = c * win.kh * win.kw, self.out_h * self.out_w * b
        charge_memory(self, "scratch", (ckk + 1, cols), what="column buffer and a row of ones")
        self._colx = self.xp.empty((ckk + 1, cols), dtype=DTYPE)
        self._colx[ckk] = 1.0
        self._col2d = self._colx[:ckk]
        self._col = self._col2d.reshape(c, win.kh, win.kw, self.out_h, self.out_w, b)

    def _input_chwn(self, x: np.ndarray) -> np.ndarray:
        """The input as a contiguous, padded CHWN array (copied unless the source is
        already batch-innermost and no padding is needed)."""
        xc = as_chwn(x, self.batchsize, self.channels, self.height, self.width)
        if not self._padded and xc.flags.c_contiguous:
            return xc
        if self._xp is None:  # an NCHW source without padding: transpose once per step
            self._xp = self.xp.empty(xc.shape, dtype=DTYPE)
        win = self.win
        np.copyto(self._xp[:, win.ph : win.ph + self.height, win.pw : win.pw + self.width], xc)
        return self._xp

    def _im2col(self, xp: np.ndarray) -> None:
        col = self._col
        # one compiled pass (numba; threaded on several BLAS threads), faster than numpy's
        # kh·kw copies on any thread count since its loops vectorise (CIFAR-10's conv1 at
        # 1 thread: 1.48 against 2.75 ms; before, with an offset index, it lost there)
        if self._compiled is not None and xp.flags.c_contiguous:
            win = self.win
            args = (win.kh, win.kw, win.sh, win.sw, self.out_h, self.out_w)
            self._compiled.im2col(xp, self._col2d, *args)
            return
        for i, j, sl in self._slices:
            np.copyto(col[:, i, j], xp[sl])

    def _col2im(self, buf: np.ndarray) -> None:
        """Sum the column gradients (in ``self._col``) into the source gradient ``buf``."""
        target = as_chwn(buf, self.batchsize, self.channels, self.height, self.width)
        if self._padded and self._gxp is None:  # a source that took no gradient at set-up
            self._gxp = self.xp.zeros(self._xp.shape, dtype=DTYPE)
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
        ckk = self.channels * self.win.kh * self.win.kw
        mm = 2.0 * self.num_filters * ckk * cols  # weight · column GEMM
        bias = float(self.num_filters * cols)
        src_grad = mm if srcs[0].grad_for(self) is not None else 0.0
        return mm + bias, mm + bias + src_grad

    # -- forward / backward -------------------------------------------------------------
    def to_onnx(self, g, inputs):
        win = self.win
        x = g.reshape(inputs[0], (self.channels, self.height, self.width), f"{self.name}/nchw")
        w = g.param(self.weight, (self.num_filters, self.channels, win.kh, win.kw))
        return g.add(
            "Conv",
            [x, w, g.param(self.bias)],
            name=self.name,
            kernel_shape=[win.kh, win.kw],
            pads=[win.ph, win.pw, win.ph, win.pw],
            strides=[win.sh, win.sw],
        )

    def forward(self, phase, srcs):
        if self._rows:
            self._forward_rows(srcs[0].data)
            return
        if self._blocks is not None:  # [W | b]·[col; 1] a block of columns at a time
            self._xin = xp = self._input_chwn(srcs[0].data)
            ckk = self._wb.shape[1] - 1
            self._wb[:, :ckk] = self.weight.value
            self._wb[:, ckk] = self.bias.value
            self._blocks.forward(xp, self._wb, self._out2d, self.win, self.out_h, self.out_w)
            return
        if self._one_launch:
            self.kernels.im2col(self._chwn(srcs[0].data), self._col, *self._window_args())
        else:
            self._im2col(self._input_chwn(srcs[0].data))
        if self._bias_row:  # [W | b]·[col; 1]
            ckk = self._col2d.shape[0]
            self._wb[:, :ckk] = self.weight.value
            self._wb[:, ckk] = self.bias.value
            gemm(self._wb, self._colx, self._out2d)
            return
        gemm(self.weight.value, self._col2d, self._out2d)
        self._out2d += self.bias.value[:, None]

    def backward(self, phase, srcs):
        wp, bp = self.weight, self.bias
        g = self._gout2d
        agg = bool(phase & kAggGrad)
        if self._bias_row:  # g·[col; 1]ᵀ = [gW | gb]
            if self._blocks is not None:
                self._blocks.weight_grad(self._xin, g, self._gwb, self.win, self.out_h,
                                         self.out_w)  # fmt: skip
            else:
                gemm(g, self._colx.T, self._gwb)
            ckk = self._gwb.shape[1] - 1
            if agg:
                wp.grad += self._gwb[:, :ckk]
                bp.grad += self._gwb[:, ckk]
            else:
                wp.grad[...] = self._gwb[:, :ckk]
                bp.grad[...] = self._gwb[:, ckk]
        else:
            if agg and self._gw_tmp is None:
                self._gw_tmp = self.xp.empty(wp.shape, dtype=DTYPE)
            gw = self._gw_tmp if agg else wp.grad
            if self._rows:
                self._weight_grad_rows(g, gw)
            else:
                gemm(g, self._col2d.T, gw)
            if agg:
                wp.grad += gw
                gemm(g, self._ones[:, None], bp.grad[:, None], beta=1.0)
            else:
                gemm(g, self._ones[:, None], bp.grad[:, None])
        buf = srcs[0].grad_for(self)
        if buf is None:
            return
        if self._rows:
            self._input_grad_rows(g, buf)
            return
        if self._colx is None and not self._one_launch:  # blocks at set-up: no matrix yet
            self._make_columns()
            self._im2col(self._xin)
        gemm(wp.value.T, g, self._col2d)  # the column buffer is free again
        if self._one_launch:
            self.kernels.col2im(self._col, self._chwn(buf), *self._window_args())
        else:
            self._col2im(buf)

    def _chwn(self, x):
        return as_chwn(x, self.batchsize, self.channels, self.height, self.width)

    def _window_args(self) -> tuple:
        w = self.win
        return (w.kh, w.kw, w.ph, w.pw, w.sh, w.sw)
