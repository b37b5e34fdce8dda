"""kDummy: a stand-in layer for tests (SINGA 0.3 §2.3, neuron_layer/dummy.cc).

``dummy_conf {input, output, shape}``:

* ``input: true`` (no sources; ``shape`` required): forward fills ``data`` of ``shape`` with
  ``U[0, 1)`` draws from the layer's ``ctx.rng``;
* otherwise (one source): ``data`` has the source's shape and forward copies its data;
* ``output: true``: backward first fills ``grad`` with ``U[0, 1)`` draws (from ``ctx.rng``);
* with a source, backward then copies ``grad`` into ``src.grad_for(self)`` (if not None).

0.3 drew from a process-wide generator seeded from ``std::random_device``; here the draws are
reproducible per layer. 0.3 did not check that ``shape`` was given.
"""

from __future__ import annotations

from singa_core.layer import NeuronLayer
from singa_core.param import DTYPE


class DummyLayer(NeuronLayer):
    type_names = ("kDummy",)
    placement = "host"  # reads records/files on the CPU; the net copies its output
    num_srclayers = (0, 1)

    def setup(self, srcs):
        conf = self.conf.dummy_conf
        self.input, self.output = bool(conf.input), bool(conf.output)
        if self.input:
            if srcs:
                raise self.error(
                    f"layer '{self.name}' (kDummy) with dummy_conf.input takes no source "
                    f"layers, got {len(srcs)}",
                    field="srclayers",
                    help="remove its srclayers, or set dummy_conf.input: false",
                )
            shape = [int(s) for s in conf.shape]
            if not shape or min(shape) <= 0:
                raise self.error(
                    f"layer '{self.name}' (kDummy) with dummy_conf.input needs a positive "
                    f"dummy_conf.shape, got {shape}",
                    field="dummy_conf.shape",
                    help="add e.g. `dummy_conf { input: true shape: 10 shape: 20 }`",
                )
            self.alloc(shape)
        else:
            if len(srcs) != 1:
                raise self.error(
                    f"layer '{self.name}' (kDummy) takes 1 source layer unless "
                    f"dummy_conf.input is true, got {len(srcs)}",
                    field="srclayers",
                    help="give it exactly one srclayers, or set dummy_conf.input: true with a "
                    "dummy_conf.shape",
                )
            self.alloc(srcs[0].data.shape)

    def forward(self, phase, srcs):
        if self.input:
            self.ctx.rng.random(dtype=DTYPE, out=self.data)
        else:
            self.data[...] = srcs[0].data

    def backward(self, phase, srcs):
        if self.output:
            self.ctx.rng.random(dtype=DTYPE, out=self.grad)
        if srcs:
            buf = srcs[0].grad_for(self)
            if buf is not None:
                buf[...] = self.grad
