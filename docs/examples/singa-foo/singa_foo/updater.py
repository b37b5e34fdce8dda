import numpy as np
from singa_core.updater import Updater, axpy

from singa_foo import foo_pb2


class SignumUpdater(Updater):
    """h <- beta h + (1 - beta) g;  w <- w - lr * lr_scale * sign(h)."""

    state_names = ("history",)

    def __init__(self, conf, lr):
        super().__init__(conf, lr)
        self.beta = conf.Extensions[foo_pb2.foo_updater_conf].beta

    def apply(self, step, value, grad, state, *, scale=1.0, lr_scale=1.0, wd_scale=1.0):
        g = self.prologue(value, grad, scale, wd_scale)
        h = state["history"]
        h *= np.float32(self.beta)
        axpy(np.float32(1 - self.beta), g, h)
        sign = self.scratch(value)  # a reused work array, never checkpointed
        np.sign(h, out=sign)
        axpy(-np.float32(self.lr(step) * lr_scale), sign, value)
