import numpy as np
from singa_core.layer import NeuronLayer
from singa_core.sequences import SequenceRun, run_arrays


class FooScale(NeuronLayer):  # data = a · x, elementwise
    placement = "device"
    a = np.float32(0.5)

    def setup(self, srcs):
        self.expect_srcs(srcs)
        self.alloc_like(srcs[0].data)

    def forward(self, phase, srcs):
        np.multiply(srcs[0].data, self.a, out=self.data)

    def backward(self, phase, srcs):
        gx = srcs[0].grad_for(self)
        if gx is not None:
            np.multiply(self.grad, self.a, out=gx)

    @classmethod
    def sequence_run(cls, copies, srcs):
        arrays = run_arrays(copies, srcs)  # the arenas: sources' data (x), copies' data (y)...
        return None if arrays is None else _FooScaleRun(copies, srcs, arrays)


class _FooScaleRun(SequenceRun):
    def __init__(self, copies, srcs, arrays):
        super().__init__(copies)
        self.srcs, self.arrays = [s[0] for s in srcs], arrays

    def forward(self, phase):
        self.fetch(self.srcs)  # a lazy device copy delivers all steps
        np.multiply(self.arrays.x, self.layers[0].a, out=self.arrays.y)  # one launch, T steps

    def backward(self, phase):
        a = self.arrays  # the copies' grad (g) and the sources' gradient buffers (gx)
        if a.gx is not None:  # overwritten, as the copies' backward would
            np.multiply(a.g, self.layers[0].a, out=a.gx)
