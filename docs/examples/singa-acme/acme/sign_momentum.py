"""kSignMomentum: a Lion-like rule with decoupled weight decay (AdamW's kind)."""

import numpy as np
from singa_core.updater import Updater, axpy


class SignMomentumUpdater(Updater):
    state_names = ("m",)
    beta = 0.9

    def apply(self, step, value, grad, state, *, scale=1.0, lr_scale=1.0, wd_scale=1.0):
        g = self.prologue(value, grad, scale, wd_scale, weight_decay=False)
        lr = self.lr(step) * lr_scale
        self.decay_weights(value, lr, wd_scale)  # value -= lr · weight_decay · wd_scale · value
        m = state["m"]  # a sign-of-momentum rule (Lion-like)
        m *= np.float32(self.beta)
        axpy(np.float32(1 - self.beta), g, m)
        step_dir = self.scratch(value)
        np.sign(m, out=step_dir)
        axpy(np.float32(-lr), step_dir, value)
