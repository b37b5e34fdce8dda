import math

from singa_core.updater import LRChange

from singa_foo import foo_pb2


class WarmupCosineLR(LRChange):
    def __init__(self, conf):
        super().__init__(conf)
        sub = conf.Extensions[foo_pb2.foo_lr_conf]
        self.warmup, self.decay, self.final_lr = sub.warmup_steps, sub.decay_steps, sub.final_lr

    def __call__(self, step):
        if step < self.warmup:
            return self.base_lr * (step + 1) / self.warmup
        t = min(step - self.warmup, self.decay)
        cos = (1 + math.cos(math.pi * t / self.decay)) / 2
        return self.final_lr + (self.base_lr - self.final_lr) * cos
