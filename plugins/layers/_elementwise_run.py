"""All unrolled copies of an elementwise layer (an activation) as one run
(:mod:`singa_core.sequences`): its forward kernel over every time step's array at once, and
its backward kernel likewise. Element by element the same operations as the copies', so the
results are the copies' bit for bit."""

from __future__ import annotations

from singa_core.sequences import SequenceRun, run_arrays


def elementwise_run(copies, srcs, forward: str, backward: str, scratch_dtype):
    """A run of ``copies`` whose ``forward`` kernel maps the source's data to the output
    (``kernel(x, y)``) and ``backward`` kernel the gradient to the source's
    (``kernel(y, g, gx, scratch)``, ``scratch`` like ``y`` of ``scratch_dtype``); None when
    the arrays are not in arenas or a copy adds a bias it absorbed (bias fusion)."""
    if any(len(s) != 1 for s in srcs) or any(c.absorbed_bias is not None for c in copies):
        return None
    a = run_arrays(copies, srcs)
    if a is None or a.x.shape != a.y.shape:
        return None
    return ElementwiseRun(copies, srcs, a.x, a.y, a.g, a.gx, forward, backward, scratch_dtype)


class ElementwiseRun(SequenceRun):
    def __init__(self, copies, srcs, x, y, g, gx, forward, backward, scratch_dtype) -> None:
        super().__init__(copies)
        self.srcs = [s[0] for s in srcs]
        self.x, self.y, self.g, self.gx = x, y, g, gx
        kernels = copies[0].kernels
        self._forward, self._backward = getattr(kernels, forward), getattr(kernels, backward)
        self._scratch_dtype = scratch_dtype
        self._scratch = None

    def forward(self, phase):
        self.fetch(self.srcs)
        self._forward(self.x, self.y)

    def backward(self, phase):
        if self.gx is None:
            return
        if self._scratch is None:
            self._scratch = self.layers[0].xp.empty(self.y.shape, dtype=self._scratch_dtype)
        self._backward(self.y, self.g, self.gx, self._scratch)
