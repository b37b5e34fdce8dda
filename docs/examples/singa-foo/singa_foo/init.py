import numpy as np
from singa_core.param import ParamGenerator

from singa_foo import foo_pb2


class RampInit(ParamGenerator):
    def fill(self, value, rng):
        sub = self.conf.Extensions[foo_pb2.foo_init_conf]
        ramp = np.arange(value.size, dtype=np.float32) * np.float32(sub.stride)
        value[...] = (ramp + np.float32(sub.start)).reshape(value.shape)
