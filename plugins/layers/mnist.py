"""kMnist: the deprecated 0.1-style MNIST parser layer (SINGA 0.3 §2.2,
input_layer/deprecated.cc).

``srclayers = [a kShardData layer]``. ``data`` is ``[batch, 1, s, s]`` with
``x = pixel / norm_a − norm_b`` (``mnist_conf``, defaults 1 and 0; computed in float32), for
every record of the shard layer's current batch: its ``pixel`` bytes (unsigned), or its
``data`` floats when it has no pixels. ``s`` is the last entry of the first record's ``shape``
(which must be square, e.g. ``[28, 28]``). The 0.1 MNIST job used ``norm_a: 127.5
norm_b: 1``, mapping pixels to [−1, 1]. The distortion fields of mnist_conf are unused, as
in 0.3. The layer provides no labels (use kLabel) and takes no gradient.

Differences from 0.3: a record without a shape of two or more entries gives ``s`` from the
square root of its value count (0.3 CHECK-failed); every record must hold exactly ``s·s``
values (0.3 only checked the first record's shape); ``norm_a: 0`` is a configuration error.
"""

from __future__ import annotations

import math

import numpy as np
from singa_builtins.layers._records import (
    bad_record_maker,
    deploy_sample_shape,
    fill_rows,
    record_source,
)

from singa_core.layer import InputLayer, kDeploy


class MnistLayer(InputLayer):
    type_names = ("kMnist",)
    placement = "host"  # reads records/files on the CPU; the net copies its output
    num_srclayers = (1, 1)
    deploy_role = "input"  # predicting: fed raw pixels, normalised as records are

    def setup(self, srcs):
        if self.ctx.phase & kDeploy:
            return self._setup_deploy()
        src = record_source(self, srcs)
        self._norm()
        sample = src.sample()
        shape = list(sample.shape)
        count = len(sample.pixel) or len(sample.data)
        if len(shape) >= 2:
            s = shape[-1]
            square = shape[-2] == s
        else:
            s = math.isqrt(count)
            square = s * s == count
        if not square or s <= 0 or s * s != count:
            raise self.error(
                f"layer '{self.name}': the first record of '{src.path}' (shape {shape}, "
                f"{count} values) is not a square image",
                field="srclayers",
                help="kMnist parses square grey-scale images such as MNIST's 28x28",
            )
        self.batchsize = int(src.batchsize)
        self.alloc([self.batchsize, 1, s, s], grad=False)
        self._rows = self.data.reshape(self.batchsize, s * s)

    def _norm(self) -> None:
        mc = self.conf.mnist_conf
        self.norm_a, self.norm_b = np.float32(mc.norm_a), np.float32(mc.norm_b)
        if self.norm_a == 0:
            raise self.error(
                f"layer '{self.name}': mnist_conf.norm_a must not be 0 (pixels are divided by it)",
                field="mnist_conf.norm_a",
                help="leave norm_a out for the default 1, or set e.g. `norm_a: 255`",
            )

    def _setup_deploy(self) -> None:
        self._norm()
        shape = deploy_sample_shape(self, "28, 28")
        s = math.isqrt(math.prod(shape))
        if s * s != math.prod(shape):
            raise self.error(
                f"layer '{self.name}' (kMnist) parses square images; {shape} is not one",
                field="srclayers",
                help="give the sample shape of a square image, e.g. 28 28",
            )
        self.side = s
        self.batchsize = int(self.ctx.batchsize)
        self.alloc([self.batchsize, 1, s, s], grad=False)
        self._rows = self.data.reshape(self.batchsize, s * s)

    def sample_shape(self):
        return (self.side, self.side)

    def feed(self, values):
        np.copyto(self._rows, values.reshape(self._rows.shape))
        self._rows /= self.norm_a
        self._rows -= self.norm_b

    def to_onnx(self, g, inputs):
        s = self.side
        x = g.reshape(inputs[0], (s * s,), f"{self.name}/rows")
        x = g.add("Div", [x, g.const(self.norm_a, f"{self.name}/norm_a")], name=f"{self.name}/a")
        x = g.add("Sub", [x, g.const(self.norm_b, f"{self.name}/norm_b")], name=f"{self.name}/b")
        return g.reshape(x, (1, s, s), self.name)

    def forward(self, phase, srcs):
        src = srcs[0]
        fill_rows(self._rows, src.records(), bad_record_maker(self, src))
        self._rows /= self.norm_a
        self._rows -= self.norm_b
