"""Checkpoint files: SINGA's BlobProtos format, atomic writes, clear errors."""

from __future__ import annotations

import os

import numpy as np
import pytest

from singa_core.errors import SingaError
from singa_core.running import checkpoint as ck
from singa_core.schema import common_pb2


def records():
    rng = np.random.default_rng(0)
    return [
        ck.ParamRecord("0#w1", 1000, rng.standard_normal((3, 5)).astype(np.float32)),
        ck.ParamRecord("0#b1", 0, rng.standard_normal(5).astype(np.float32)),
    ]


def test_params_are_wire_compatible_blobprotos():
    data = ck.encode_params(records())
    bp = common_pb2.BlobProtos()
    bp.ParseFromString(data)
    assert list(bp.name) == ["0#w1", "0#b1"]
    assert list(bp.version) == [1000, 0]
    assert list(bp.blob[0].shape) == [3, 5]
    np.testing.assert_array_equal(np.array(bp.blob[0].data, np.float32), records()[0].value.ravel())
    # and files written by protobuf (as SINGA's C++ writes them) decode identically
    back = ck.decode_params(bp.SerializeToString(), "x")
    for a, b in zip(back, records(), strict=True):
        assert a.name == b.name and a.version == b.version
        np.testing.assert_array_equal(a.value, b.value)


def test_negative_version_roundtrip():
    rec = [ck.ParamRecord("0#w", -1, np.zeros(2, np.float32))]
    assert ck.decode_params(ck.encode_params(rec), "x")[0].version == -1


def test_corrupt_checkpoint_is_a_user_error(tmp_path):
    data = ck.encode_params(records())
    bad = tmp_path / "step5-worker0"
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(SingaError) as info:
        ck.read_params(bad)
    assert str(bad) in str(info.value.where) and info.value.help
    with pytest.raises(SingaError):
        ck.read_params(tmp_path / "absent")


def test_state_roundtrip_and_no_pickle(tmp_path):
    st = ck.TrainingState(
        7,
        {"seed": 3, "layers": {"1": {"x": {"state": {"pos": 4}}}}},
        {"0#w1::history": np.ones((2, 2), np.float32)},
    )
    p = tmp_path / "s.npz"
    p.write_bytes(ck.encode_state(st))
    back = ck.read_state(p)
    assert back.step == 7 and back.meta["seed"] == 3
    np.testing.assert_array_equal(back.arrays["0#w1::history"], np.ones((2, 2)))
    p.write_bytes(b"garbage")
    with pytest.raises(SingaError):
        ck.read_state(p)


def test_atomic_write_leaves_no_partial_file(tmp_path, monkeypatch):
    target = tmp_path / "checkpoint" / "step1-worker0"

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(SingaError):
        ck.write_checkpoint(tmp_path, 1, 0, records(), ck.TrainingState(1))
    assert not target.exists()
    assert list((tmp_path / "checkpoint").iterdir()) == []


def test_latest_checkpoint_needs_complete_pair(tmp_path):
    ck.write_checkpoint(tmp_path, 10, 0, records(), ck.TrainingState(10))
    ck.write_checkpoint(tmp_path, 20, 0, records(), ck.TrainingState(20))
    (tmp_path / "checkpoint" / "step30-worker0").write_bytes(b"")  # no state: incomplete
    step, files = ck.latest_checkpoint(tmp_path)
    assert step == 20 and [f.name for f in files] == ["step20-worker0"]
