"""kFixed: lr = base_lr at every step; plus registration of all seven change methods."""

import pytest
from singa_builtins.lr_changes.fixed import FixedLR

from singa_core.plugin_host.discovery import iter_submodule_types
from singa_core.schema import job_pb2
from singa_core.updater import LRChange


def test_fixed_is_constant():
    lr = FixedLR(job_pb2.LRGenProto(type=job_pb2.kFixed, base_lr=0.05))
    for step in (0, 1, 7, 1000, 123456):
        assert lr(step) == pytest.approx(0.05, rel=1e-7)


def test_fixed_default_base_lr():
    assert FixedLR(job_pb2.LRGenProto(type=job_pb2.kFixed))(10) == pytest.approx(0.01, rel=1e-7)


def test_all_seven_change_methods_registered():
    names = {c.type_names[0] for c in iter_submodule_types("singa_builtins.lr_changes", LRChange)}
    assert names == {
        "kFixed",
        "kStep",
        "kFixedStep",
        "kLinear",
        "kExponential",
        "kInverse",
        "kInverseT",
    }
    # every type name is a ChangeMethod enum name
    for name in names:
        job_pb2.ChangeMethod.Value(name)
