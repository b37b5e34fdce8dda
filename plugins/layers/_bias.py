"""The activations' bias-absorbing forward kernels (``singa_core.layer.AbsorbsBias``).

On a device the net builder lets an activation that alone reads a kInnerProduct add the
product's bias itself (:mod:`singa_core.netbuilder.fusion`): ``bias_ACT_forward(x, b,
out)`` adds ``b`` (one value per column: ``b.shape == x.shape[-1:]``) to ``x`` in place and
writes ``ACT(x)`` to ``out`` (``out`` may be ``x``) — on a GPU one launch writing both, where
the product's own add and the activation were two. The host implementation is the two
numpy steps the unfused layers run (or, where the activation has one, a compiled pass with
their bits: the sigmoid's, ``_exp_passes``), so the stand-in computes exactly what the CPU
does.
"""

from __future__ import annotations

import numpy as np

from singa_core.cuda import elementwise_kernel
from singa_core.kernels import define_kernel


def define_bias_activation(act: str, forward_host, expr: str, doc: str, fused=None) -> None:
    """Define ``bias_{act}_forward`` from the activation's host forward ``forward_host(x,
    out)`` and ``expr``, its CUDA C expression of ``v`` (the biased element). ``fused(x,
    b, out)``, where given, is the host's one-pass form with the same bits, tried first
    (it says False where it does not apply)."""

    def unfused(x: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
        x += b
        forward_host(x, out)

    def host(x: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
        if fused is None or not fused(x, b, out):
            unfused(x, b, out)

    host.__module__ = forward_host.__module__  # the kernel's provider: the activation's module
    host.__name__ = host.__qualname__ = f"bias_{act}_forward"
    launch = elementwise_kernel(
        f"singa_bias_{act}_forward",
        "float* x, float* y, const float* b",
        f"const float v = x[i] + b[i % hdim];\nx[i] = v;\ny[i] = {expr};",
        unfused,
        scalars="long long hdim",
        pick=lambda x, b, out: (x, out),
        extra=lambda x, b, out: ((b,), (np.int64(b.size),)),
    )

    def fits(x, b, out) -> bool:
        # the bias indexes element i by its column: C-contiguous arrays only (elsewhere
        # numpy's two steps, which dispatch to the device)
        return x.flags.c_contiguous and out.flags.c_contiguous and b.size == x.shape[-1]

    define_kernel(
        f"bias_{act}_forward", host=host, generic=unfused, cuda=launch, fits=fits,
        doc=f"x += b; {doc}",
    )  # fmt: skip
