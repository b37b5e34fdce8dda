"""kBM (alias kCudnnBM): batch normalisation (SINGA 0.3 §2.3 BMLayer / CudnnBMLayer).

Statistics are per channel over (batch, height, width) of a ``[B, C, H, W]`` source (cuDNN's
SPATIAL mode), or per feature over the batch of a ``[B, D]`` source. Four params, as in 0.3
(cudnn_bm.conf initialises them to 1, 0, 0, 0), each shaped ``(1, C, 1, 1)`` (``(1, D)`` for
a 2-D source):

0. ``scale`` γ and 1. ``bias`` β, learnt;
2. running mean μ_r and 3. running inverse standard deviation ρ_r = 1/sqrt(σ²_r + eps) (what
   cuDNN v4 kept in the buffer 0.3 calls "running inv-variance"), both maintained by the
   layer (``Param.learnable = False``: the updater never touches them).

Training (phase has ``kTrain``), with m values per channel, ``eps = 1e-5``::

    μ = mean(x),  σ² = mean((x − μ)²),  x̂ = (x − μ)/sqrt(σ² + eps),  y = γ·x̂ + β
    gβ = Σ g,  gγ = Σ g·x̂,  gx = γ/sqrt(σ² + eps) · (g − gβ/m − x̂·gγ/m)

and the running statistics move by an exponential average with factor f = 0.1:
``μ_r ← (1−f)·μ_r + f·μ``, ``σ²_r ← (1−f)·σ²_r + f·σ²·m/(m−1)`` (unbiased), stored as ρ_r.
A channel whose ρ_r is 0 (the conf's initial value: no estimate yet) takes the batch's
statistics outright. Other phases use the running statistics: ``y = γ·(x − μ_r)·ρ_r + β``;
backward then gives the affine gradients ``gx = g·γ·ρ_r``, ``gγ = Σ g·(x − μ_r)·ρ_r``,
``gβ = Σ g``. The running statistics' gradients are always 0. With ``kAggGrad`` the param
gradients are accumulated.

Deviations from 0.3: the CPU kBM did nothing (empty forward/backward); 0.3's cuDNN layer
averaged with factor 1.0 (running statistics = the last batch's) and let the updater apply
weight decay and momentum to the running statistics; 2-D sources are accepted (0.3 needed
4-D).
"""

from __future__ import annotations

import numpy as np

from singa_core.layer import NeuronLayer, kAggGrad, kTrain
from singa_core.param import DTYPE

EPS = 1e-5  # cuDNN's CUDNN_BN_MIN_EPSILON, which 0.3 passed
AVERAGE_FACTOR = 0.1  # weight of a new batch in the running statistics


class BMLayer(NeuronLayer):
    type_names = ("kBM", "kCudnnBM")
    placement = "device"

    def setup(self, srcs):
        self.expect_srcs(srcs)
        x = srcs[0].data
        if x is None or x.ndim not in (2, 4):
            shape = None if x is None else tuple(x.shape)
            raise self.error(
                f"layer '{self.name}' (kBM) normalises a [batch, channels, height, width] "
                f"or [batch, features] source; '{srcs[0].name}' has shape {shape}",
                field="srclayers",
                help="put kBM after a convolution, pooling or inner-product layer",
            )
        if len(self.conf.param) < 4:
            raise self.error(
                f"layer '{self.name}' (kBM) needs 4 param entries (scale, bias, running mean, "
                f"running inverse std); it has {len(self.conf.param)}",
                field="param",
                help="add, in this order: `param { init { type: kConstant value: 1 } }` and "
                "three `param { init { type: kConstant value: 0 } }`",
            )
        c = int(x.shape[1])
        pshape = (1, c, 1, 1) if x.ndim == 4 else (1, c)
        self.scale = self.create_param(0, pshape, "scale")
        self.bias = self.create_param(1, pshape, "bias")
        self.running_mean = self.create_param(2, pshape, "running_mean")
        self.running_inv_std = self.create_param(3, pshape, "running_inv_std")
        for p in (self.running_mean, self.running_inv_std):
            p.learnable = False
        self.channels = c
        self.count = int(x.size // c)  # values per channel
        self.alloc_like(x)
        self._xc = np.empty_like(self.data)  # x − the mean used by the last forward
        self._tmp = np.empty_like(self.data)  # scratch
        self._out: np.ndarray | None = None  # scratch for a source grad laid out differently
        # per-channel vectors, (1, C, 1, 1) for broadcasting over the 4-D view
        self._mean, self._inv_std, self._k, self._var, self._gbeta, self._ggamma = (
            self.xp.zeros((1, c, 1, 1), dtype=DTYPE) for _ in range(6)
        )
        self._batch_stats = False  # whether the last forward normalised with batch statistics

    @staticmethod
    def _as4d(a: np.ndarray) -> np.ndarray:
        return a if a.ndim == 4 else a[:, :, None, None]

    @staticmethod
    def _sum(out: np.ndarray, a: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
        """Per-channel Σ a (or Σ a·b) of 4-D arrays into ``out`` (1, C, 1, 1)."""
        ops = ("nchw->c", a) if b is None else ("nchw,nchw->c", a, b)
        if isinstance(out, np.ndarray):
            np.einsum(*ops, out=out.reshape(-1))
        else:  # CuPy's einsum takes no out=
            out.reshape(-1)[...] = np.einsum(*ops)
        return out

    def to_onnx(self, g, inputs):
        # predicting uses the running statistics: y = (x − μ_r)·(γ·ρ_r) + β
        k = (self.scale.value * self.running_inv_std.value).astype(DTYPE)
        centred = g.add("Sub", [inputs[0], g.param(self.running_mean)], name=f"{self.name}/-mean")
        scaled = g.add("Mul", [centred, g.const(k, f"{self.name}/k")], name=f"{self.name}/k")
        return g.add("Add", [scaled, g.param(self.bias)], name=self.name)

    def forward(self, phase, srcs):
        x = self._as4d(srcs[0].data)
        y, xc = self._as4d(self.data), self._as4d(self._xc)
        gamma, beta = self._as4d(self.scale.value), self._as4d(self.bias.value)
        mean, inv_std, k = self._mean, self._inv_std, self._k
        self._batch_stats = bool(phase & kTrain)
        if self._batch_stats:
            inv_m = DTYPE(1.0 / self.count)
            np.multiply(self._sum(mean, x), inv_m, out=mean)
            np.subtract(x, mean, out=xc)
            var = self._sum(self._var, xc, xc)
            np.multiply(var, inv_m, out=var)  # biased, for normalising
            np.add(var, DTYPE(EPS), out=inv_std)
            np.sqrt(inv_std, out=inv_std)
            np.divide(1.0, inv_std, out=inv_std)
            self._update_running(var)
        else:
            np.copyto(mean, self._as4d(self.running_mean.value))
            np.copyto(inv_std, self._as4d(self.running_inv_std.value))
            np.subtract(x, mean, out=xc)
        np.multiply(gamma, inv_std, out=k)
        np.multiply(xc, k, out=y)
        np.add(y, beta, out=y)

    def _update_running(self, var: np.ndarray) -> None:
        """The exponential averages of the batch mean and unbiased variance (float64)."""
        mean_r = self._as4d(self.running_mean.value)
        rho_r = self._as4d(self.running_inv_std.value)
        m = self.count
        batch_var = var.astype(np.float64) * (m / (m - 1) if m > 1 else 1.0)
        rho = rho_r.astype(np.float64)
        with np.errstate(divide="ignore"):
            old_var = np.maximum(1.0 / (rho * rho) - EPS, 0.0)
        f = np.where(rho > 0, AVERAGE_FACTOR, 1.0)  # ρ_r = 0: no estimate yet
        old_var = np.where(rho > 0, old_var, 0.0)
        new_var = (1.0 - f) * old_var + f * batch_var
        mean_r[...] = (1.0 - f) * mean_r + f * self._mean
        rho_r[...] = 1.0 / np.sqrt(new_var + EPS)

    def backward(self, phase, srcs):
        gamma_p, beta_p = self.scale, self.bias
        g, xc, tmp = self._as4d(self.grad), self._as4d(self._xc), self._as4d(self._tmp)
        acc = bool(phase & kAggGrad)
        inv_std = self._inv_std
        gbeta = self._sum(self._gbeta, g)
        ggamma = self._sum(self._ggamma, g, xc)
        np.multiply(ggamma, inv_std, out=ggamma)  # Σ g·x̂
        for p, v in ((beta_p, gbeta), (gamma_p, ggamma)):
            pg = self._as4d(p.grad)
            if acc:
                pg += v
            else:
                np.copyto(pg, v)
        for p in (self.running_mean, self.running_inv_std):
            p.grad.fill(0.0)  # not learnt; 0 is also the right accumulated value
        buf = srcs[0].grad_for(self)
        if buf is None:
            return
        out = buf
        if buf.strides != self.data.strides:  # mixed layouts make every ufunc slow
            if self._out is None:
                self._out = np.empty_like(self.data)
            out = self._out
        out4 = self._as4d(out)
        k = self._k  # γ·inv_std
        np.multiply(g, k, out=out4)
        if self._batch_stats:
            # gx = k·g − k·gβ/m − (k·inv_std·gγ/m)·xc
            inv_m = DTYPE(1.0 / self.count)
            np.multiply(xc, k * inv_std * ggamma * inv_m, out=tmp)
            np.subtract(out4, tmp, out=out4)
            np.subtract(out4, k * gbeta * inv_m, out=out4)
        if out is not buf:
            np.copyto(buf, out)
