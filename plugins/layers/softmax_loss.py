"""kSoftmaxLoss: softmax + cross-entropy (SINGA 0.3 §2.4, loss_layer/softmax.cc).

``srclayers = [logits, label provider]``; labels come from ``srcs[1].labels()``. With
``p = softmax(logits)`` row-wise (max-subtracted) over ``count/B`` classes:

* ``loss = scale·Σ_n −ln max(p[n, label_n], FLT_MIN) / B`` (``self.loss`` and metric "loss");
* ``accuracy = scale·#{n : label_n among the top-k of p[n]} / B`` (metric "accuracy"; 0.3
  also multiplies the accuracy by ``scale``). Ranking is by ``(p, class index)`` descending,
  as 0.3's ``partial_sort`` with ``std::greater<pair>``: of equal probabilities the higher
  class index ranks first;
* gradient to the logits: ``scale·(p − onehot(label))/B``, times 1/n for a replica of a
  layer partitioned on the batch across n workers (the gradient of the group's mean loss).

``self.data`` holds ``p`` (shape of the logits). A label outside ``[0, classes)`` is a
SingaError here (0.3 CHECK-fails on a negative label and reads out of bounds otherwise),
checked on the host copy of the labels before they reach a device.

Two kernels (``softmax_xent`` forward, ``softmax_xent_grad`` backward) do the work: one
launch each on a GPU, reading nothing back. The loss and accuracy stay on the device in
the layer's metric sums until a displayed step reads them; ties are ranked without a
branch.
"""

from __future__ import annotations

import threading

import numpy as np
from singa_builtins.layers import CUDNN_ALIAS_NOTE

from singa_core.cuda import CUPY, grid_for
from singa_core.device import is_host_array, to_host
from singa_core.kernels import define_kernel, kernels_for
from singa_core.layer import AbsorbsBias, LossLayer
from singa_core.param import DTYPE
from singa_core.schema import job_pb2
from singa_core.sequences import RowIndependent

FLT_MIN = float(np.finfo(np.float32).tiny)  # 1.17549435e-38


# -- the kernels ------------------------------------------------------------------------------
class _Scratch:
    """The host kernel's work arrays for one batch shape (kept per thread: the shm engine
    runs several workers as threads of one process)."""

    def __init__(self, batch: int, dim: int) -> None:
        self.rowmax = np.empty(batch, dtype=DTYPE)
        self.rowsum = np.empty(batch, dtype=DTYPE)
        self.rowbase = np.arange(batch, dtype=np.int64) * dim
        self.idx = np.empty(batch, dtype=np.int64)
        self.pt = np.empty(batch, dtype=DTYPE)
        self.pmax = np.empty(batch, dtype=DTYPE)
        self.hitrow = np.empty(batch, dtype=bool)
        self.cols = np.arange(dim, dtype=np.int64)
        self.above = np.empty((batch, dim), dtype=bool)
        self.tie = np.empty((batch, dim), dtype=bool)
        self.later = np.empty((batch, dim), dtype=bool)


_scratch: dict[tuple[int, int, int], _Scratch] = {}


def _scratch_for(batch: int, dim: int) -> _Scratch:
    key = (threading.get_ident(), batch, dim)
    s = _scratch.get(key)
    if s is None:
        s = _scratch[key] = _Scratch(batch, dim)
    return s


def _hits(prob, pt, labels, topk: int, w: _Scratch) -> int:
    """#rows whose label ranks among the top-k by (p, class index) descending."""
    batch = prob.shape[0]
    if topk == 1:
        np.max(prob, axis=1, out=w.pmax)
        np.equal(prob, w.pmax[:, None], out=w.tie)
        if np.count_nonzero(w.tie) == batch:  # a single maximum in every row
            np.equal(pt, w.pmax, out=w.hitrow)
            return int(np.count_nonzero(w.hitrow))
    above, tie = w.above, w.tie
    np.greater(prob, pt[:, None], out=above)
    np.equal(prob, pt[:, None], out=tie)
    if np.count_nonzero(tie) > batch:  # equal probabilities besides the truth
        np.greater(w.cols, labels[:, None], out=w.later)
        np.logical_and(tie, w.later, out=tie)
        np.logical_or(above, tie, out=above)
    rank = np.count_nonzero(above, axis=1)
    return int(np.count_nonzero(rank < topk))


def softmax_xent_host(x, labels, prob, rows, counter, sums, last, topk, scale) -> None:
    """``prob = softmax(x)`` row-wise; adds the batch's ``scale·mean(−ln p[label])`` to
    ``sums[0]`` and its top-k accuracy times ``scale`` to ``sums[1]``; ``last[0]`` = the
    batch's loss. ``rows`` (B×2 float64) and ``counter`` (int32, zero) are the GPU's
    scratch."""
    batch, dim = prob.shape
    w = _scratch_for(batch, dim)
    np.max(x, axis=1, out=w.rowmax)
    np.subtract(x, w.rowmax[:, None], out=prob)
    np.exp(prob, out=prob)
    np.sum(prob, axis=1, out=w.rowsum)
    prob /= w.rowsum[:, None]
    np.add(w.rowbase, labels, out=w.idx)
    pt = w.pt
    np.take(prob.reshape(-1), w.idx, out=pt)
    hit = _hits(prob, pt, labels, int(topk), w)
    np.maximum(pt, FLT_MIN, out=pt)
    np.log(pt, out=pt)
    loss = -float(pt.sum(dtype=np.float64)) * scale / batch
    sums[0] += loss
    sums[1] += hit * scale / batch
    last[0] = loss


def softmax_xent_grad_host(prob, labels, grad, gscale) -> None:
    """``grad = gscale·(prob − onehot(labels))`` (C-contiguous ``grad``)."""
    batch, dim = prob.shape
    w = _scratch_for(batch, dim)
    flat = grad.reshape(-1)
    np.copyto(grad.reshape(batch, dim), prob)
    np.add(w.rowbase, labels, out=w.idx)
    flat[w.idx] -= 1.0
    flat *= DTYPE(gscale)


#: CUDA label types by numpy dtype
_LABEL_TYPES = {"int64": "long long", "int32": "int", "uint8": "unsigned char", "int16": "short"}


def _forward_name(bias: bool) -> str:
    return "singa_bias_softmax_xent" if bias else "singa_softmax_xent"


def _forward_source(ltype: str, bias: bool = False) -> str:
    """The forward kernel's CUDA C; with ``bias`` (``singa_bias_softmax_xent``) each row
    first adds ``b`` to the logits in place (its thread alone touches the row)."""
    xtype = "float*" if bias else "const float*"
    bias_param = "const float* __restrict__ b, " if bias else ""
    add_bias = "for (int j = 0; j < dim; ++j) xr[j] = xr[j] + b[j];" if bias else ""
    return f"""
extern "C" __global__ void {_forward_name(bias)}({xtype} __restrict__ x, {bias_param}
    const {ltype}* __restrict__ labels, float* __restrict__ prob, double* rows, int* counter,
    double* sums, double* last, int batch, int dim, int topk, double scale) {{
  const int stride = gridDim.x * blockDim.x;
  for (int n = blockIdx.x * blockDim.x + threadIdx.x; n < batch; n += stride) {{
    {xtype} xr = x + (long long)n * dim;
    float* pr = prob + (long long)n * dim;
    {add_bias}
    float m = xr[0];
    for (int j = 1; j < dim; ++j) m = fmaxf(m, xr[j]);
    float s = 0.0f;
    for (int j = 0; j < dim; ++j) {{ const float e = expf(xr[j] - m); pr[j] = e; s += e; }}
    for (int j = 0; j < dim; ++j) pr[j] = pr[j] / s;
    const long long lab = (long long)labels[n];
    const float pt = pr[lab];
    int above = 0;
    for (int j = 0; j < dim; ++j) {{
      const float q = pr[j];
      above += (q > pt) | ((q == pt) & (j > lab));
    }}
    rows[2 * n] = (double)logf(fmaxf(pt, 1.17549435e-38f));
    rows[2 * n + 1] = above < topk ? 1.0 : 0.0;
    __threadfence();
    if (atomicAdd(counter, 1) == batch - 1) {{  /* the last row: sum every row, in order */
      const volatile double* r = rows;
      double l = 0.0, h = 0.0;
      for (int k = 0; k < batch; ++k) {{ l += r[2 * k]; h += r[2 * k + 1]; }}
      const double loss = -l * scale / batch;
      sums[0] += loss;
      sums[1] += h * scale / batch;
      last[0] = loss;
      *counter = 0;
    }}
  }}
}}
"""


def _grad_source(ltype: str) -> str:
    return f"""
extern "C" __global__ void singa_softmax_xent_grad(const float* __restrict__ prob,
    const {ltype}* __restrict__ labels, float* __restrict__ grad, long long total, int dim,
    float gscale) {{
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += stride) {{
    const long long n = i / dim;
    const long long j = i - n * dim;
    grad[i] = (prob[i] - (j == (long long)labels[n] ? 1.0f : 0.0f)) * gscale;
  }}
}}
"""


def _label_type(labels) -> str:
    try:
        return _LABEL_TYPES[labels.dtype.name]
    except KeyError:
        raise TypeError(f"labels of dtype {labels.dtype} (use an integer type)") from None


def _launch_forward(rt, x, b, labels, prob, rows, counter, sums, last, topk, scale) -> None:
    """One launch of the forward kernel, with the bias ``b`` added first unless None."""
    batch, dim = prob.shape
    bias = b is not None
    launch = rt.kernel(_forward_source(_label_type(labels), bias), _forward_name(bias))
    launch(
        grid_for(batch),
        256,
        (x, *((b,) if bias else ()), labels, prob, rows, counter, sums, last, np.int32(batch),
         np.int32(dim), np.int32(topk), np.float64(scale)),
    )  # fmt: skip


def softmax_xent_cuda(x, labels, prob, rows, counter, sums, last, topk, scale, rt=CUPY):
    _launch_forward(rt, x, None, labels, prob, rows, counter, sums, last, topk, scale)


def bias_softmax_xent_host(x, b, labels, prob, rows, counter, sums, last, topk, scale):
    """``x += b`` (one value per class, over every row), then :func:`softmax_xent_host`:
    the two steps the unfused layers take, so the stand-in computes what the CPU does."""
    x += b
    softmax_xent_host(x, labels, prob, rows, counter, sums, last, topk, scale)


def bias_softmax_xent_cuda(x, b, labels, prob, rows, counter, sums, last, topk, scale,
                           rt=CUPY):  # fmt: skip
    _launch_forward(rt, x, b, labels, prob, rows, counter, sums, last, topk, scale)


def _bias_fits(x, b, labels, prob, *rest) -> bool:
    return x.flags.c_contiguous and b.size == prob.shape[1]


def bias_softmax_xent_generic(x, b, labels, prob, rows, counter, sums, last, topk, scale):
    """Any device: the bias added, then the device's own ``softmax_xent``."""
    x += b
    kernels_for(x).softmax_xent(x, labels, prob, rows, counter, sums, last, topk, scale)


def softmax_xent_grad_cuda(prob, labels, grad, gscale, rt=CUPY):
    batch, dim = prob.shape
    launch = rt.kernel(_grad_source(_label_type(labels)), "singa_softmax_xent_grad")
    total = batch * dim
    launch(
        grid_for(total),
        256,
        (prob, labels, grad, np.int64(total), np.int32(dim), np.float32(gscale)),
    )


define_kernel(
    "softmax_xent",
    host=softmax_xent_host,
    cuda=softmax_xent_cuda,
    doc="softmax, cross-entropy and top-k hits of a batch; the sums stay on the device",
)
define_kernel(
    "bias_softmax_xent",
    host=bias_softmax_xent_host,
    cuda=bias_softmax_xent_cuda,
    fits=_bias_fits,
    generic=bias_softmax_xent_generic,
    doc="x += b (the logits' producer's bias, Layer.absorbs_bias), then softmax_xent",
)
define_kernel(
    "softmax_xent_grad",
    host=softmax_xent_grad_host,
    cuda=softmax_xent_grad_cuda,
    doc="the softmax loss's gradient to the logits",
)


class SoftmaxLossLayer(RowIndependent, AbsorbsBias, LossLayer):
    type_names = ("kSoftmaxLoss", "kCudnnSoftmaxLoss")
    placement = "device"
    alias_note = CUDNN_ALIAS_NOTE
    num_srclayers = (2, 2)
    deploy_role = "output"
    METRICS = ("loss", "accuracy")

    @classmethod
    def deploy_output(cls, conf):
        """Predicting: the class probabilities, a kSoftmax over the logits."""
        out = job_pb2.LayerProto(name=conf.name, type=job_pb2.kSoftmax)
        out.srclayers.append(conf.srclayers[0])
        return out

    def setup(self, srcs):
        self.expect_srcs(srcs)
        conf = self.conf.softmaxloss_conf
        src = srcs[0].data
        self.batchsize = int(src.shape[0])
        self.dim = int(src.size // self.batchsize)
        self.topk = int(conf.topk)
        self.scale = float(conf.scale)
        if not 1 <= self.topk <= self.dim:
            raise self.error(
                f"layer '{self.name}': softmaxloss_conf.topk must be in [1, {self.dim}] "
                f"(the number of classes), got {self.topk}",
                field="softmaxloss_conf.topk",
                help=f"set topk between 1 and {self.dim} (1: top-1 accuracy)",
            )
        self.expect_labels(srcs[1], self.batchsize)
        self.alloc(src.shape, grad=False)
        B, D = self.batchsize, self.dim
        self._prob = self.data.reshape(B, D)
        self._rows = self.xp.empty((B, 2), dtype=np.float64)
        self._counter = self.xp.zeros(1, dtype=np.int32)
        self._last = self.xp.zeros(1, dtype=np.float64)
        self._gscale = float(DTYPE(self.scale * self.group_share() / B))

    def _labels(self, srcs):
        """The batch's labels (on this layer's device), checked on their host copy."""
        src = srcs[1]
        labels = src.labels()
        if labels is None:
            raise self.error(
                f"layer '{self.name}': source '{srcs[1].name}' provides no labels",
                field="srclayers",
                help="give the loss layer a second source that provides labels (the data "
                "layer, or a kLabel layer)",
            )
        labels = labels[: self.batchsize]
        host = labels if is_host_array(labels) else src.host_copy("labels")
        if host is None:  # a device label source without a host copy: one read
            host = to_host(labels)
        host = host[: self.batchsize]
        if host.dtype.kind not in "iu":
            host = host.astype(np.int64)
            labels = labels.astype(np.int64)
        lo, hi = int(host.min()), int(host.max())
        if lo < 0 or hi >= self.dim:
            bad = lo if lo < 0 else hi
            raise self.error(
                f"layer '{self.name}': label {bad} is outside [0, {self.dim}) "
                f"(the layer has {self.dim} classes)",
                field="srclayers",
                help="labels are class indices from 0 to the number of classes - 1: set the "
                "num_output of the layer before the loss to the number of classes, or fix "
                "the data's labels",
            )
        return labels

    def forward(self, phase, srcs):
        B = self.batchsize
        x = srcs[0].data.reshape(B, self.dim)
        if not x.flags.c_contiguous:
            x = self.xp.ascontiguousarray(x)
        self._batch_labels = labels = self._labels(srcs)
        sums = self.metric_sums(self.METRICS)
        scratch = (self._prob, self._rows, self._counter, sums, self._last)
        if self.absorbed_bias is None:
            self.kernels.softmax_xent(x, labels, *scratch, self.topk, self.scale)
        else:  # the logits' bias, added in the same launch (AbsorbsBias)
            b = self.absorbed_bias.value
            self.kernels.bias_softmax_xent(x, b, labels, *scratch, self.topk, self.scale)
        self.loss = self._last[0]  # a 0-d array of the layer's device: read it when needed

    def backward(self, phase, srcs):
        buf = srcs[0].grad_for(self)
        if buf is None:
            return
        labels = self._batch_labels
        if not buf.flags.c_contiguous:  # a strided view: compute, then assign
            tmp = self.xp.empty(buf.shape, dtype=buf.dtype)
            self.kernels.softmax_xent_grad(self._prob, labels, tmp, self._gscale)
            buf[...] = tmp
        else:
            self.kernels.softmax_xent_grad(self._prob, labels, buf, self._gscale)
