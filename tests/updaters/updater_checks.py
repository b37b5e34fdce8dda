"""Learning-rate schedules from the built-in plugins to drive the updater tests. The
checks themselves (snapshot/restore, in-place updates, the least-squares comparison with a
float64 reference) are the plugin author's kit's: ``singa_core.testing``."""

from __future__ import annotations

from singa_builtins.lr_changes.fixed import FixedLR
from singa_builtins.lr_changes.step import StepLR

from singa_core.schema import job_pb2


def fixed_lr(base_lr):
    return FixedLR(job_pb2.LRGenProto(type=job_pb2.kFixed, base_lr=base_lr))


def step_lr(base_lr, gamma, change_freq):
    conf = job_pb2.LRGenProto(type=job_pb2.kStep, base_lr=base_lr)
    conf.step_conf.gamma = gamma
    conf.step_conf.change_freq = change_freq
    return StepLR(conf)
