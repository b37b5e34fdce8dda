"""Verified checkpoints: a SHA-256 manifest beside every checkpoint, structural checks for
files without one (SINGA 0.3's), and exit 2 naming the file for anything damaged."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from conftest import invoke_singa as invoke
from conftest import singa_ok as ok

from singa_core.errors import SingaError
from singa_core.running import checkpoint as ck
from singa_core.schema import common_pb2


def params_of(path):
    return {r.name: r for r in ck.read_params(path)}


@pytest.fixture
def trained(small_job, tmp_path_factory):
    """A small job trained 20 steps with checkpoints at steps 0, 10 and 20."""
    conf, ws = small_job(steps=20, checkpoint_freq=10)
    ok("train", conf, "--seed", "3", "-q")
    return conf, ws


def damaged_variants(data: bytes, seed: int = 11) -> list[tuple[str, bytes]]:
    """0-byte, truncated at many offsets, and 1-32 bytes flipped at seeded positions."""
    rng = np.random.default_rng(seed)
    out = [("empty", b"")]
    for frac in (0.001, 0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.99):
        n = max(1, int(len(data) * frac))
        out.append((f"truncated at {n}", data[:n]))
    out.append(("one byte short", data[:-1]))
    for k in (1, 1, 2, 3, 4, 5, 8, 8, 12, 16, 20, 24, 28, 32, 32, 32):
        b = bytearray(data)
        for pos in rng.choice(len(data), size=k, replace=False):
            b[pos] ^= int(rng.integers(1, 256))
        out.append((f"{k} byte(s) flipped", bytes(b)))
    return out


def test_every_checkpoint_has_a_manifest_of_its_files(trained):
    _, ws = trained
    d = ws / "checkpoint"
    man = json.loads((d / "step10-worker0.manifest.json").read_text())
    assert man["format"] == ck.MANIFEST_FORMAT and man["step"] == 10
    for name in ("step10-worker0", "step10-worker0.state.npz"):
        data = (d / name).read_bytes()
        assert man["files"][name] == {"bytes": len(data), "sha256": ck.sha256_hex(data)}
    # the params file itself is still plain BlobProtos (SINGA 0.3 reads it)
    bp = common_pb2.BlobProtos()
    bp.ParseFromString((d / "step10-worker0").read_bytes())
    assert list(bp.name) == ["0#w1", "0#b1", "0#w2", "0#b2"]


@pytest.mark.slow
def test_33_damaged_checkpoints_are_each_refused_naming_the_file(trained, tmp_path):
    conf, ws = trained
    src = ws / "checkpoint" / "step20-worker0"
    variants = damaged_variants(src.read_bytes())
    assert len(variants) >= 30
    for i, (what, data) in enumerate(variants):
        d = tmp_path / f"d{i}"
        d.mkdir()
        for f in src.parent.glob("step20-worker0*"):
            shutil.copy(f, d / f.name)
        bad = d / "step20-worker0"
        bad.write_bytes(data)
        res = invoke("test", conf, "--checkpoint", bad)
        assert res.exit_code == 2, (what, res.output)
        assert str(bad) in res.output and "Traceback" not in res.output, (what, res.output)
        if what != "empty" and "truncated" not in what and "short" not in what:
            # a flip is caught by the digest: expected and found are both named
            assert "expected SHA-256" in res.output and "found" in res.output, res.output


def test_truncated_files_without_manifest_are_refused_by_structure(trained, tmp_path):
    conf, ws = trained
    data = (ws / "checkpoint" / "step20-worker0").read_bytes()
    for what, cut in damaged_variants(data)[:15]:  # empty and the truncations
        bad = tmp_path / "hand-made"
        bad.write_bytes(cut)
        res = invoke("test", conf, "--checkpoint", bad)
        assert res.exit_code == 2 and str(bad) in res.output, (what, res.output)


def test_empty_checkpoint_is_refused_everywhere(trained, tmp_path):
    conf, ws = trained
    empty = tmp_path / "empty.ckpt"
    empty.write_bytes(b"")
    res = invoke("test", conf, "--checkpoint", empty)
    assert res.exit_code == 2 and "holds no Param (the file is empty)" in res.output
    res = invoke("train", conf, "--workspace", tmp_path / "ft", "-o", f"checkpoint_path={empty}")
    assert res.exit_code == 2 and str(empty) in res.output and "holds no Param" in res.output
    other_ws = f"cluster.workspace={tmp_path / 'none'}"  # no checkpoint there: checkpoint_path
    res = invoke("test", conf, "-o", other_ws, "-o", f"checkpoint_path={empty}")
    assert res.exit_code == 2 and str(empty) in res.output and "holds no Param" in res.output
    (ws / "checkpoint" / "step20-worker0").write_bytes(b"")  # the newest, state file intact
    res = invoke("train", conf, "--resume", "-o", "train_steps=30")
    assert res.exit_code == 2 and "resuming at step" not in res.output
    assert "the newest checkpoint (step 20) is damaged" in res.output
    assert "newest intact checkpoint is step 10" in res.output
    assert "--resume-from 10" in res.output


def test_resume_refuses_a_damaged_newest_and_resume_from_continues_exactly(small_job, tmp_path):
    conf, ws = small_job(steps=30, checkpoint_freq=10, dropout=True)
    ok("train", conf, "--seed", "6", "-q")
    full = params_of(ws / "checkpoint" / "step30-worker0")
    d = ws / "checkpoint"
    data = bytearray((d / "step30-worker0").read_bytes())
    rng = np.random.default_rng(5)
    for trial in range(6):  # 6 of 6 bit flips on --resume were accepted before
        b = bytearray(data)
        for pos in rng.choice(len(b), size=trial + 1, replace=False):
            b[pos] ^= 0x5A
        (d / "step30-worker0").write_bytes(bytes(b))
        res = invoke("train", conf, "--resume", "-o", "train_steps=40")
        assert res.exit_code == 2, res.output
        assert str(d / "step30-worker0") in res.output and "step 20" in res.output
    # the state file damaged instead: also refused, naming it
    (d / "step30-worker0").write_bytes(bytes(data))
    state = d / "step30-worker0.state.npz"
    sdata = state.read_bytes()
    state.write_bytes(sdata[: len(sdata) // 2])
    res = invoke("train", conf, "--resume", "-o", "train_steps=40")
    assert res.exit_code == 2 and str(state) in res.output
    # resuming explicitly from the intact step 20 gives the uninterrupted step 30
    res = ok("train", conf, "--resume-from", "20", "-q")
    assert "resuming at step 20" in res.output
    again = params_of(d / "step30-worker0")
    for name, rec in full.items():
        np.testing.assert_array_equal(rec.value, again[name].value, err_msg=name)
    res = invoke("train", conf, "--resume-from", "15")
    assert res.exit_code == 2 and "no complete checkpoint of step 15" in res.output
    assert "0, 10, 20, 30" in res.output


def singa03_checkpoint(path, params: dict[str, np.ndarray], version: int = 1000) -> None:
    """A BlobProtos file as SINGA 0.3's C++ writes it (protobuf, no manifest)."""
    bp = common_pb2.BlobProtos()
    for name, value in params.items():
        bp.name.append(f"0#{name}")
        bp.version.append(version)
        blob = bp.blob.add()
        blob.shape.extend(value.shape)
        blob.data.extend(value.ravel().tolist())
    path.write_bytes(bp.SerializeToString())


def test_a_manifestless_singa03_checkpoint_loads_exactly(small_job, tmp_path):
    conf, ws = small_job(steps=2)
    rng = np.random.default_rng(0)
    values = {
        "w1": rng.standard_normal((16, 4)).astype(np.float32),
        "b1": rng.standard_normal(16).astype(np.float32),
        "w2": rng.standard_normal((3, 16)).astype(np.float32),
        "b2": rng.standard_normal(3).astype(np.float32),
    }
    old = tmp_path / "step1000-worker0"
    singa03_checkpoint(old, values)
    assert not ck.manifest_path(old).exists()
    ok("test", conf, "--checkpoint", old)
    ok(
        "train",
        conf,
        "-q",
        "-o",
        f"checkpoint_path={old}",
        "-o",
        "updater.learning_rate.base_lr=0",
        "-o",
        "updater.weight_decay=0",
        "-o",
        "updater.momentum=0",
        "-o",
        "checkpoint_freq=1",
    )
    loaded = params_of(ws / "checkpoint" / "step0-worker0")
    for name, value in values.items():
        np.testing.assert_array_equal(loaded[f"0#{name}"].value, value, err_msg=name)


def test_a_checkpoint_of_another_net_is_refused(small_job, tmp_path):
    conf, _ = small_job(steps=2)
    other = tmp_path / "other"
    singa03_checkpoint(other, {"conv1_weight": np.ones((2, 2), np.float32)})
    res = invoke("test", conf, "--checkpoint", other)
    assert res.exit_code == 2 and "holds none of this net's Params" in res.output
    assert "0#conv1_weight" in res.output and str(other) in res.output


def test_checkpoint_path_of_a_folder_is_a_clean_error(small_job):
    conf, _ = small_job(steps=2)
    res = invoke("train", conf, "-o", "checkpoint_path=/etc")
    assert res.exit_code == 2 and "/etc" in res.output
    assert "IsADirectoryError" not in res.output and "Traceback" not in res.output
    with pytest.raises(SingaError, match="is a folder"):
        ck.read_params("/etc")


def test_a_damaged_manifest_is_named(trained):
    conf, ws = trained
    man = ws / "checkpoint" / "step20-worker0.manifest.json"
    man.write_text("{not json")
    res = invoke("test", conf)
    assert res.exit_code == 2 and str(man) in res.output
