"""Every checkpoint singa writes can be verified (issue 38, point 2): a flipped byte in any
file of a checkpoint — params, training state, manifest — is refused; without the manifest,
a file is never used silently (one warning that it cannot be verified); the write order
leaves no params file without its manifest; --resume prefers a verifiable checkpoint."""

from __future__ import annotations

import json
import shutil
import warnings

import pytest
from conftest import invoke_singa as invoke
from conftest import run_singa
from conftest import singa_ok as ok

from singa_core.errors import SingaError, SingaWarning
from singa_core.running import checkpoint as ck


@pytest.fixture
def trained(small_job):
    """A small job trained 20 steps with checkpoints at steps 0, 10 and 20."""
    conf, ws = small_job(steps=20, checkpoint_freq=10)
    ok("train", conf, "--seed", "3", "-q")
    return conf, ws


def _copy_step(src_dir, dst_dir, name="step20-worker0", manifest=True):
    dst_dir.mkdir()
    for f in src_dir.glob(name + "*"):
        if manifest or not f.name.endswith(ck.MANIFEST_SUFFIX):
            shutil.copy(f, dst_dir / f.name)
    return dst_dir / name


def _load(params):
    """Everything a command does with a checkpoint: verify both files, read the Params and
    the training state. Returns the SingaWarnings it gave."""
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        ck.verify_checkpoint([params])
        ck.read_params(params)
        ck.read_state(str(params) + ck.STATE_SUFFIX)
    return [w for w in got if issubclass(w.category, SingaWarning)]


FLIPS = (0x01, 0x80, 0xFF)


def test_a_flipped_byte_anywhere_in_a_checkpoint_with_its_manifest_is_refused(trained, tmp_path):
    _, ws = trained
    params = _copy_step(ws / "checkpoint", tmp_path / "c")
    assert _load(params) == []  # intact and verified: no warning
    files = [params, ck.manifest_path(params), params.with_name(params.name + ck.STATE_SUFFIX)]
    checked = 0
    for f in files:
        data = f.read_bytes()
        # every byte of the params and the manifest; every other byte of the (larger) state
        for pos in range(0, len(data), 2 if f.name.endswith(ck.STATE_SUFFIX) else 1):
            x = FLIPS[pos % len(FLIPS)]  # one bit, the top bit, every bit: in turn
            b = bytearray(data)
            b[pos] ^= x
            f.write_bytes(bytes(b))
            with pytest.raises(SingaError) as exc:  # what every load runs first
                ck.verify_checkpoint([params])
            assert exc.value.where and f.name in str(exc.value.where), (f.name, pos, x)
            checked += 1
        f.write_bytes(data)
    assert checked > 1000, checked
    assert _load(params) == []


def test_without_its_manifest_a_flipped_byte_is_refused_or_warned_about(trained, tmp_path):
    _, ws = trained
    params = _copy_step(ws / "checkpoint", tmp_path / "c", manifest=False)
    warned = _load(params)
    assert len({str(w.message) for w in warned}) == 2  # the params and the state file
    assert all("cannot be verified" in str(w.message) for w in warned)
    for f in (params, params.with_name(params.name + ck.STATE_SUFFIX)):
        data = f.read_bytes()
        refused = used = 0
        for pos in range(0, len(data), 4):
            b = bytearray(data)
            b[pos] ^= 0xFF
            f.write_bytes(bytes(b))
            try:
                warned = _load(params)
            except SingaError as err:
                assert f.name in str(err.where)
                refused += 1
                continue
            # used: never silently, the warning names the file that cannot be verified
            assert any(str(f) in str(w.message) for w in warned), (f.name, pos)
            used += 1
        f.write_bytes(data)
        assert refused and used, (f.name, refused, used)


def test_the_cli_says_in_one_line_that_a_checkpoint_cannot_be_verified(trained, tmp_path):
    conf, ws = trained
    params = _copy_step(ws / "checkpoint", tmp_path / "c", manifest=False)
    res = run_singa("test", str(conf), "--checkpoint", str(params))
    assert res.returncode == 0, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if "cannot be verified" in ln]
    assert len(lines) == 1 and lines[0].startswith("warning: checkpoint file "), res.stderr
    assert str(params) in lines[0] and "Traceback" not in res.stderr


def _interrupt_at(monkeypatch, when):
    """A KeyboardInterrupt (a kill, as far as the files go) at ``when`` of a write."""
    from singa_core.running import fileio

    real_commit = fileio.AtomicFile.commit
    real_atomic = ck.atomic_write_bytes

    def commit(self):
        if when == "params rename" and ck.STATE_SUFFIX not in self.path:
            raise KeyboardInterrupt
        return real_commit(self)

    def atomic(path, data, what="file"):
        if when == "manifest" and what == "checkpoint manifest":
            raise KeyboardInterrupt
        return real_atomic(path, data, what)

    monkeypatch.setattr(fileio.AtomicFile, "commit", commit)
    monkeypatch.setattr(ck, "atomic_write_bytes", atomic)


@pytest.mark.parametrize("when", ["manifest", "params rename"])
def test_a_kill_during_a_write_leaves_no_params_file_without_its_manifest(
    trained, monkeypatch, when
):
    _, ws = trained
    params = ck.read_params(ws / "checkpoint" / "step20-worker0")
    state = ck.read_state(ws / "checkpoint" / "step20-worker0.state.npz")
    ck.write_checkpoint(ws, 30, 0, params, state)
    assert 30 in ck.checkpoint_steps(ws)
    _interrupt_at(monkeypatch, when)
    with pytest.raises(KeyboardInterrupt):
        ck.write_checkpoint(ws, 30, 0, params, state)  # rewriting step 30, killed
    monkeypatch.undo()
    d = ws / "checkpoint"
    for f in d.iterdir():
        if ck._STEP_FILE.match(f.name):
            assert ck.manifest_path(f).exists(), f
    assert 30 not in ck.checkpoint_steps(ws)  # a step without params is no checkpoint
    assert ck.find_resume(ws)[0] == 20
    ck.remove_stale_files(ws)


def test_resume_continues_from_a_verifiable_checkpoint_not_a_newer_unverifiable_one(trained):
    conf, ws = trained
    d = ws / "checkpoint"
    ck.manifest_path(d / "step20-worker0").unlink()  # a kill under an older singa
    with pytest.warns(SingaWarning, match="step 20 .* cannot be verified; continuing from step 10"):
        assert ck.find_resume(ws)[0] == 10
    res = invoke("train", conf, "--resume", "-o", "train_steps=30", "-q")
    assert res.exit_code == 0, res.output
    assert "resuming at step 10" in res.output
    # only unverifiable ones: used, with the warning of each file
    for f in d.glob("*" + ck.MANIFEST_SUFFIX):
        f.unlink()
    with pytest.warns(SingaWarning, match="cannot be verified"):
        assert ck.find_resume(ws)[0] == 30


def test_a_manifest_names_its_step_and_run_and_vouches_for_itself(trained):
    _, ws = trained
    man = ws / "checkpoint" / "step10-worker0.manifest.json"
    doc = json.loads(man.read_text())
    assert doc["format"] == ck.MANIFEST_FORMAT and doc["step"] == 10 and doc["worker"] == 0
    assert isinstance(doc["written"], float) and doc["run"]["pid"] > 0
    # another step's manifest put in its place is refused (it vouches for other files)
    other = json.loads((ws / "checkpoint" / "step20-worker0.manifest.json").read_text())
    man.write_text(json.dumps(other))
    with pytest.raises(SingaError, match="not step 10 worker 0"):
        ck.verify_checkpoint([ws / "checkpoint" / "step10-worker0"])


def test_a_manifest_of_an_earlier_singa_still_verifies(trained):
    _, ws = trained
    params = ws / "checkpoint" / "step20-worker0"
    man = ck.manifest_path(params)
    doc = json.loads(man.read_text())
    old = {"format": ck.MANIFEST_FORMAT_1, "step": 20, "worker": 0, "files": doc["files"]}
    man.write_text(json.dumps(old, indent=1))
    assert _load(params) == []  # verified against it, no warning
    info = ck.checkpoint_info(params)
    assert info.verified and info.step == 20 and info.written is None
    # a /1 manifest with anything more is not one an earlier singa wrote
    man.write_text(json.dumps({**old, "written": 1.0}))
    with pytest.raises(SingaError, match="not a singa-checkpoint-manifest/1 document"):
        _load(params)
