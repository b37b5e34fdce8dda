"""Checkpoints in SINGA 0.3's format, plus what exact resumption needs (§6).

``WORKSPACE/checkpoint/step<S>-worker<W>`` is a serialized ``singa.BlobProtos``: for every
owner Param its runtime name (``0#w1``), version and blob (shape + float data). SINGA 0.3
can read it and we can read SINGA's. Beside it, ``step<S>-worker<W>.state.npz`` holds what
SINGA never saved and an exact resume needs: the updater's history arrays, the layers'
data cursors and random-generator states, the step, the seed, the updater type and the
plugin versions that produced it. It is an ``.npz`` read with ``allow_pickle=False``.

Every file is written atomically (:func:`singa_core.running.fileio.atomic_write_bytes`): a temporary
file in the same folder, flushed and fsync'ed, then renamed over the final name. The state
file is written first, so a params file whose state file exists is always complete.

Verification. Last, ``step<S>-worker<W>.manifest.json`` records the size and SHA-256 of
both files (the BlobProtos bytes stay exactly SINGA's format). Every read checks a file
against its manifest and refuses a mismatch (exit 2, naming the file, the expected and the
found digest). A file without a manifest (written by SINGA 0.3, by hand, or killed between
the params and the manifest write) is accepted after a structural check: it must parse
completely and hold at least one Param. :func:`find_resume` picks the checkpoint ``--resume``
continues from and refuses a damaged newest one, naming the newest intact one.

Housekeeping. :func:`write_checkpoint` refuses non-finite values
(:class:`singa_core.running.numeric.NonFiniteError`: the newest good checkpoint is never replaced by
a diverged state) and, with ``keep`` > 0, deletes all but the ``keep`` newest steps, except
steps the user marked by creating ``step<S>.keep`` in the checkpoint folder.
:func:`remove_stale_files` deletes the temporary files a killed run left behind.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from singa_core.contracts.errors import SingaError
from singa_core.contracts.param import DTYPE
from singa_core.running.fileio import atomic_write_bytes

_STEP_FILE = re.compile(r"^step(\d+)-worker(\d+)$")
_KEEP_FILE = re.compile(r"^step(\d+)\.keep$")
# temporary files of fileio.AtomicFile (".NAME.XXXXXXXX.tmp") and the layer states the shm
# engine's partitions hand to worker 0 (".step<S>-part<W>.layers.json")
_STALE_FILE = re.compile(r"^\..+\.[a-z0-9_]{8}\.tmp$|^\.step\d+-part\d+\.layers\.json$")
STATE_SUFFIX = ".state.npz"
MANIFEST_SUFFIX = ".manifest.json"
MANIFEST_FORMAT = "singa-checkpoint-manifest/1"
MAX_CHECKPOINT_BYTES = 512 << 20


@dataclass
class ParamRecord:
    name: str
    version: int
    value: np.ndarray


@dataclass
class TrainingState:
    """Everything besides Param values that an exact resume restores."""

    step: int
    meta: dict = field(default_factory=dict)  # seed, updater, plugins, layer states
    arrays: dict[str, np.ndarray] = field(default_factory=dict)  # updater history


def _varint(n: int) -> bytes:
    if n < 0:
        n += 1 << 64  # int32/int64 negatives are 10-byte varints
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _read_varint(buf: memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _int32(n: int) -> int:
    n &= (1 << 64) - 1
    n &= 0xFFFFFFFF
    return n - (1 << 32) if n >= 1 << 31 else n


def encode_params(records: list[ParamRecord]) -> bytes:
    """Serialize a ``singa.BlobProtos`` (wire-compatible; float data packed as SINGA does).

    Encoded by hand because going through Python protobuf containers costs seconds for the
    ~10M floats of the MNIST MLP.
    """
    out = bytearray()
    for r in records:
        name = r.name.encode()
        out += b"\x22" + _varint(len(name)) + name
    for r in records:
        out += b"\x18" + _varint(int(r.version))
    for r in records:
        raw = np.ascontiguousarray(r.value, dtype="<f4").tobytes()
        blob = bytearray()
        for s in r.value.shape:
            blob += b"\x08" + _varint(int(s))
        blob += b"\x12" + _varint(len(raw)) + raw
        out += b"\x2a" + _varint(len(blob)) + blob
    return bytes(out)


def _skip(buf: memoryview, pos: int, wire: int) -> int:
    if wire == 0:
        return _read_varint(buf, pos)[1]
    if wire == 1:
        return pos + 8
    if wire == 2:
        n, pos = _read_varint(buf, pos)
        return pos + n
    if wire == 5:
        return pos + 4
    raise ValueError(f"unsupported wire type {wire}")


def _decode_blob(buf: memoryview) -> tuple[tuple[int, ...], np.ndarray]:
    shape: list[int] = []
    chunks: list[np.ndarray] = []
    pos = 0
    while pos < len(buf):
        key, pos = _read_varint(buf, pos)
        fnum, wire = key >> 3, key & 7
        if fnum == 1 and wire == 0:
            v, pos = _read_varint(buf, pos)
            shape.append(_int32(v))
        elif fnum == 1 and wire == 2:
            n, pos = _read_varint(buf, pos)
            end = pos + n
            while pos < end:
                v, pos = _read_varint(buf, pos)
                shape.append(_int32(v))
        elif fnum == 2 and wire == 2:
            n, pos = _read_varint(buf, pos)
            if n % 4 or pos + n > len(buf):
                raise ValueError("truncated float data")
            chunks.append(np.frombuffer(buf[pos : pos + n], dtype="<f4"))
            pos += n
        elif fnum == 2 and wire == 5:
            chunks.append(np.frombuffer(buf[pos : pos + 4], dtype="<f4"))
            pos += 4
        else:
            pos = _skip(buf, pos, wire)
    if pos != len(buf):
        raise ValueError("truncated blob")
    data = np.concatenate(chunks) if chunks else np.zeros(0, dtype="<f4")
    return tuple(shape), data.astype(DTYPE, copy=True)


def decode_params(data: bytes, path: str) -> list[ParamRecord]:
    """Parse a ``singa.BlobProtos`` checkpoint (SINGA's or ours)."""
    buf = memoryview(data)
    names: list[str] = []
    versions: list[int] = []
    blobs: list[tuple[tuple[int, ...], np.ndarray]] = []
    pos = 0
    try:
        while pos < len(buf):
            key, pos = _read_varint(buf, pos)
            fnum, wire = key >> 3, key & 7
            if fnum == 4 and wire == 2:
                n, pos = _read_varint(buf, pos)
                names.append(bytes(buf[pos : pos + n]).decode())
                pos += n
            elif fnum == 3 and wire == 0:
                v, pos = _read_varint(buf, pos)
                versions.append(_int32(v))
            elif fnum == 3 and wire == 2:
                n, pos = _read_varint(buf, pos)
                end = pos + n
                while pos < end:
                    v, pos = _read_varint(buf, pos)
                    versions.append(_int32(v))
            elif fnum == 5 and wire == 2:
                n, pos = _read_varint(buf, pos)
                if pos + n > len(buf):
                    raise ValueError("truncated blob")
                blobs.append(_decode_blob(buf[pos : pos + n]))
                pos += n
            else:
                pos = _skip(buf, pos, wire)
        if pos != len(buf):
            raise ValueError("truncated file")
    except (ValueError, IndexError, UnicodeDecodeError) as exc:
        raise SingaError(
            f"not a valid SINGA checkpoint (BlobProtos): {exc}",
            where=path,
            help="checkpoint files are WORKSPACE/checkpoint/step<S>-worker<W>; "
            "a damaged file must be removed to resume from an earlier one",
        ) from None
    if len(names) != len(blobs):
        raise SingaError(
            f"corrupt checkpoint: {len(names)} names but {len(blobs)} blobs",
            where=path,
            help="the file is damaged; use an earlier checkpoint",
        )
    out = []
    for i, name in enumerate(names):
        shape, arr = blobs[i]
        if any(d < 0 for d in shape):
            raise SingaError(
                f"corrupt checkpoint: param '{name}' has negative shape {shape}",
                where=path,
                help="the file is damaged; use an earlier checkpoint",
            )
        expected = int(np.prod(shape)) if shape else arr.size
        if arr.size != expected:
            raise SingaError(
                f"corrupt checkpoint: param '{name}' has shape {shape} but {arr.size} values",
                where=path,
                help="the file is damaged; use an earlier checkpoint",
            )
        version = versions[i] if i < len(versions) else 0
        out.append(ParamRecord(name, version, arr.reshape(shape) if shape else arr))
    return out


_DAMAGED_HELP = (
    "the file changed after singa wrote it (disk or copy error, or an edit): use an earlier "
    "checkpoint (`singa train --resume-from STEP`) or restore this one from a backup"
)


def manifest_path(params_path: str | Path) -> Path:
    """The manifest of checkpoint ``step<S>-worker<W>`` (it covers the ``.state.npz`` too)."""
    return Path(str(params_path) + MANIFEST_SUFFIX)


def _params_path_of(path: Path) -> Path:
    name = path.name
    return path.with_name(name[: -len(STATE_SUFFIX)]) if name.endswith(STATE_SUFFIX) else path


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_manifest(params_path: str | Path) -> dict[str, dict] | None:
    """``{file name: {"bytes": n, "sha256": hex}}`` from the manifest beside a checkpoint, or
    None when it has none (SINGA 0.3's and hand-made checkpoints)."""
    mp = manifest_path(params_path)
    try:
        raw = mp.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SingaError(
            f"cannot read the checkpoint manifest: {exc.strerror or exc}",
            where=str(mp),
            help="check the file's permissions",
        ) from None
    try:
        doc = json.loads(raw.decode("utf-8"))
        if not isinstance(doc, dict) or doc.get("format") != MANIFEST_FORMAT:
            raise ValueError(f"not a {MANIFEST_FORMAT} document")
        files = doc["files"]
        for name, entry in files.items():
            if not (
                isinstance(name, str)
                and isinstance(entry.get("bytes"), int)
                and re.fullmatch(r"[0-9a-f]{64}", str(entry.get("sha256")))
            ):
                raise ValueError(f"bad entry for {name!r}")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise SingaError(
            f"damaged checkpoint manifest: {exc}",
            where=str(mp),
            help="the manifest records the SHA-256 of the checkpoint's files; use an earlier "
            "checkpoint (`singa train --resume-from STEP`), or delete the manifest to load "
            "the files after a structural check only",
        ) from None
    return files


def read_checkpoint_bytes(path: str | Path, what: str = "checkpoint file") -> bytes:
    """The bytes of a checkpoint file, checked against its manifest when it has one."""
    p = Path(path)
    try:
        size = p.stat().st_size
    except FileNotFoundError:
        raise SingaError(
            f"{what} not found",
            where=str(path),
            help="checkpoint_path lists files like WORKSPACE/checkpoint/step1000-worker0; "
            "resuming needs both step<S>-worker<W> and its .state.npz",
        ) from None
    except OSError as exc:
        raise SingaError(f"cannot read {what}: {exc.strerror or exc}", where=str(path)) from None
    if p.is_dir():
        raise SingaError(
            f"{what} is a folder",
            where=str(path),
            help="give a checkpoint file such as WORKSPACE/checkpoint/step1000-worker0",
        )
    if size > MAX_CHECKPOINT_BYTES:
        raise SingaError(
            f"{what} is larger than {MAX_CHECKPOINT_BYTES >> 20} MB",
            where=str(path),
            help="is this really a SINGA checkpoint?",
        )
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise SingaError(
            f"cannot read {what}: {exc.strerror or exc}",
            where=str(path),
            help="check that it is a regular, readable file",
        ) from None
    files = read_manifest(_params_path_of(p))
    if files is not None:
        entry = files.get(p.name)
        if entry is None:
            raise SingaError(
                f"{what} is not listed in its manifest {manifest_path(_params_path_of(p))}",
                where=str(path),
                help=_DAMAGED_HELP,
            )
        found = sha256_hex(data)
        if found != entry["sha256"] or len(data) != entry["bytes"]:
            raise SingaError(
                f"{what} is damaged: expected SHA-256 {entry['sha256']} ({entry['bytes']} "
                f"bytes, from its manifest), found {found} ({len(data)} bytes)",
                where=str(path),
                help=_DAMAGED_HELP,
            )
    return data


def read_params(path: str | Path) -> list[ParamRecord]:
    """The Params of a BlobProtos checkpoint: verified against its manifest, else checked
    for structure; a file holding no Param (empty, or not a checkpoint) is an error."""
    data = read_checkpoint_bytes(path)
    records = decode_params(data, str(path))
    if not records:
        raise SingaError(
            "checkpoint holds no Param" + (" (the file is empty)" if not data else ""),
            where=str(path),
            help="a checkpoint is a WORKSPACE/checkpoint/step<S>-worker<W> file written by "
            "SINGA or singa; use an earlier checkpoint or fix checkpoint_path",
        )
    return records


def encode_state(state: TrainingState) -> bytes:
    meta = dict(state.meta, step=state.step)
    buf = io.BytesIO()
    arrays = {f"a/{k}": v for k, v in state.arrays.items()}
    arrays["meta"] = np.frombuffer(json.dumps(meta, sort_keys=True).encode(), dtype=np.uint8)
    np.savez(buf, **arrays)
    return buf.getvalue()


def _load_state(path: str | Path, with_arrays: bool) -> tuple[dict, dict[str, np.ndarray]]:
    data = read_checkpoint_bytes(path, "training-state file")
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            meta = json.loads(bytes(z["meta"]).decode())
            if not isinstance(meta, dict) or not isinstance(meta.get("step"), int):
                raise ValueError("its metadata has no step")
            arrays = {k[2:]: z[k] for k in z.files if k.startswith("a/")} if with_arrays else {}
    except (
        OSError,
        ValueError,
        KeyError,
        EOFError,
        zipfile.BadZipFile,
        zlib.error,
        NotImplementedError,  # zipfile: an unsupported compression, version or flag
        RuntimeError,  # zipfile: "is encrypted, password required"
    ) as exc:
        raise SingaError(
            f"corrupt training-state file: {exc}",
            where=str(path),
            help="the file is damaged; resume from an earlier checkpoint with "
            "`singa train --resume-from STEP`",
        ) from None
    return meta, arrays


def read_state(path: str | Path) -> TrainingState:
    meta, arrays = _load_state(path, with_arrays=True)
    return TrainingState(step=int(meta.pop("step")), meta=meta, arrays=arrays)


def read_state_meta(path: str | Path) -> dict:
    """Only the metadata of a training-state file (its arrays are not decoded)."""
    return _load_state(path, with_arrays=False)[0]


def checkpoint_dir(workspace: str | Path) -> Path:
    return Path(workspace) / "checkpoint"


def _step_files(d: Path, step: int) -> list[Path]:
    """Every file of checkpoint step ``step`` in folder ``d`` (params, states, manifests)."""
    out = []
    for f in d.iterdir():
        m = _STEP_FILE.match(f.name.split(".", 1)[0])
        if m and int(m.group(1)) == step:
            out.append(f)
    return out


def write_checkpoint(
    workspace: str | Path,
    step: int,
    worker: int,
    params: list[ParamRecord],
    state: TrainingState,
    *,
    keep: int = 0,
) -> Path:
    """Write checkpoint ``step<step>-worker<worker>``: the training state, the BlobProtos
    params, then their manifest, each atomically. Every engine writes through here.

    Refuses non-finite values (:class:`~singa_core.running.numeric.NonFiniteError`, nothing
    written).
    With ``keep`` > 0, then deletes all but the ``keep`` newest steps up to ``step``, except
    those marked with ``step<S>.keep`` (:func:`prune_checkpoints`).
    """
    from singa_core.running.numeric import check_checkpoint_values

    check_checkpoint_values(params, step)
    d = checkpoint_dir(workspace)
    path = d / f"step{step}-worker{worker}"
    state_path = Path(str(path) + STATE_SUFFIX)
    man = manifest_path(path)
    try:  # an older run's manifest must never vouch for this run's files
        man.unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise SingaError(
            f"cannot replace checkpoint manifest: {exc.strerror or exc}",
            where=str(man),
            help="check the checkpoint folder's permissions",
        ) from None
    state_bytes, params_bytes = encode_state(state), encode_params(params)
    atomic_write_bytes(state_path, state_bytes, "checkpoint file")
    atomic_write_bytes(path, params_bytes, "checkpoint file")
    doc = {
        "format": MANIFEST_FORMAT,
        "step": int(step),
        "worker": int(worker),
        "files": {
            p.name: {"bytes": len(b), "sha256": sha256_hex(b)}
            for p, b in ((path, params_bytes), (state_path, state_bytes))
        },
    }
    atomic_write_bytes(man, (json.dumps(doc, indent=1) + "\n").encode(), "checkpoint manifest")
    if keep > 0:
        prune_checkpoints(workspace, keep, newest=step)
    return path


def checkpoint_steps(workspace: str | Path) -> dict[int, list[Path]]:
    """Complete steps in WORKSPACE/checkpoint (params file with its state): step -> files."""
    d = checkpoint_dir(workspace)
    if not d.is_dir():
        return {}
    steps: dict[int, list[Path]] = {}
    for f in d.iterdir():
        m = _STEP_FILE.match(f.name)
        if m and Path(str(f) + STATE_SUFFIX).exists():
            steps.setdefault(int(m.group(1)), []).append(f)
    return {s: sorted(files) for s, files in steps.items()}


def latest_checkpoint(workspace: str | Path) -> tuple[int, list[Path]] | None:
    """The newest complete step in WORKSPACE/checkpoint: (step, [param files])."""
    steps = checkpoint_steps(workspace)
    if not steps:
        return None
    step = max(steps)
    return step, steps[step]


def verify_checkpoint(files: list[Path]) -> dict:
    """Check every file of one checkpoint step (manifest digests, else structure); returns
    the training-state metadata of the first. Raises SingaError naming a damaged file."""
    meta: dict | None = None
    for f in files:
        read_params(f)
        m = read_state_meta(str(f) + STATE_SUFFIX)
        meta = m if meta is None else meta
    return meta or {}


def marked_steps(workspace: str | Path) -> set[int]:
    """Steps the user marked to keep (``touch WORKSPACE/checkpoint/step<S>.keep``)."""
    d = checkpoint_dir(workspace)
    if not d.is_dir():
        return set()
    return {int(m.group(1)) for f in d.iterdir() if (m := _KEEP_FILE.match(f.name))}


def find_resume(workspace: str | Path, step: int | None = None) -> tuple[int, list[Path], dict]:
    """(step, param files, state metadata) of the checkpoint to resume from: ``step``, or
    the newest. A damaged one is refused; for the newest, the error names the newest intact
    checkpoint, which ``--resume-from`` continues from."""
    d = checkpoint_dir(workspace)
    steps = checkpoint_steps(workspace)
    if not steps:
        raise SingaError(
            f"--resume: no checkpoint in {d}",
            help="train without --resume first, with checkpoint_freq > 0 to save along the way",
        )
    if step is not None:
        if step not in steps:
            raise SingaError(
                f"--resume-from {step}: {d} has no complete checkpoint of step {step}",
                help="steps there: " + ", ".join(str(s) for s in sorted(steps)),
            )
        return step, steps[step], verify_checkpoint(steps[step])
    newest = max(steps)
    try:
        return newest, steps[newest], verify_checkpoint(steps[newest])
    except SingaError as err:
        intact = None
        for s in sorted(steps, reverse=True)[1:]:
            try:
                verify_checkpoint(steps[s])
            except SingaError:
                continue
            intact = s
            break
        if intact is None:
            note, help_ = "no older checkpoint is intact", "start a new run without --resume"
        else:
            note = f"the newest intact checkpoint is step {intact} ({steps[intact][0]})"
            help_ = f"continue from it with `singa train --resume-from {intact}`"
        raise SingaError(
            f"the newest checkpoint (step {newest}) is damaged: {err.message}",
            where=err.where,
            notes=[note],
            help=help_,
        ) from None


def prune_checkpoints(workspace: str | Path, keep: int, *, newest: int) -> list[int]:
    """Delete every checkpoint step up to ``newest`` but the ``keep`` newest and the marked
    ones (``step<S>.keep``). Steps after ``newest`` (an earlier run's) are left alone.
    Returns the steps deleted."""
    d = checkpoint_dir(workspace)
    marked = marked_steps(workspace)
    older = sorted((s for s in checkpoint_steps(workspace) if s <= newest), reverse=True)
    removed = []
    for s in older[keep:]:
        if s in marked:
            continue
        # the params files first: a step without them is no longer a checkpoint
        files = sorted(_step_files(d, s), key=lambda f: (f.name.count("."), f.name))
        for f in files:
            try:
                f.unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise SingaError(
                    f"cannot delete old checkpoint file: {exc.strerror or exc}",
                    where=str(f),
                    help="check the checkpoint folder's permissions, or do not pass "
                    "--keep-checkpoints",
                ) from None
        removed.append(s)
    return removed


def remove_stale_files(workspace: str | Path) -> list[Path]:
    """Delete the temporary files a killed run left in the workspace and its checkpoint
    folder (atomic writes that never finished, partitions' layer states). Returns them."""
    removed = []
    for d in (Path(workspace), checkpoint_dir(workspace)):
        if not d.is_dir():
            continue
        for f in sorted(d.iterdir()):
            if _STALE_FILE.match(f.name) and f.is_file():
                try:
                    f.unlink()
                except OSError:
                    continue
                removed.append(f)
    return removed


# -- applying checkpoints to nets ------------------------------------------------------------
def load_param_files(
    params, files, *, start_step: int, reset_version: bool, where=None
) -> set[str]:
    """Load values (and versions) from checkpoint ``files`` into owner ``params``.

    Files are applied in order, later ones overriding earlier ones (SINGA's
    ``checkpoint_path``). Names match with or without SINGA's ``0#`` prefix. A loaded
    Param always keeps its loaded values, whatever the saved version (0.3 re-initialised
    those saved with version 0, SINGA-107); with ``reset_version`` its version becomes
    ``start_step``, else the saved one. Returns the names of the Params that were loaded:
    the caller initialises only the others (``job.prepare_job``), so a loaded Param needs
    no ``init``.
    """
    from singa_core.contracts.names import plain_param_name

    by_name = {plain_param_name(p.name): p for p in params if p.is_owner}
    loaded: set[str] = set()
    for f in files:
        records = read_params(f)
        if not any(plain_param_name(r.name) in by_name for r in records):
            raise SingaError(
                "checkpoint holds none of this net's Params",
                where=str(f),
                notes=[
                    "it holds: " + _some(r.name for r in records),
                    "the net's Params: " + _some(by_name),
                ],
                help="the checkpoint was written by another net; remove it from "
                "checkpoint_path (or --checkpoint) or give this net's checkpoint",
            )
        for rec in records:
            p = by_name.get(plain_param_name(rec.name))
            if p is None:
                continue
            if tuple(rec.value.shape) != p.shape and rec.value.size != p.size:
                raise SingaError(
                    f"param '{p.name}' has shape {p.shape} in the net but "
                    f"{tuple(rec.value.shape)} in the checkpoint",
                    where=str(f),
                    help="the checkpoint was written by a different net; remove it from "
                    "checkpoint_path or fix the layer sizes",
                )
            p.value[...] = rec.value.reshape(p.shape)
            p.version = start_step if reset_version else rec.version
            loaded.add(p.name)
    return loaded


def _some(names, limit: int = 8) -> str:
    names = list(names)
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def layer_states(nets: dict) -> dict:
    """JSON-able resumable state of every layer of ``nets`` (phase -> layer -> state)."""
    out = {}
    for phase, net in nets.items():
        out[str(phase)] = {
            layer.name: {
                "state": layer.state_dict(),
                "rng": layer.ctx.rng.bit_generator.state,
                # metrics since the last display: a resumed run displays the same averages
                # (a list: the state's JSON sorts keys, the display keeps this order)
                "metrics": [[k, v, layer._metric_count[k]] for k, v in layer._metric_sum.items()],
            }
            for layer in net.layers
        }
    return out


def restore_layer_states(nets: dict, states: dict) -> None:
    for phase, net in nets.items():
        for layer in net.layers:
            st = states.get(str(phase), {}).get(layer.name)
            if st is None:
                continue
            layer.load_state_dict(st["state"])
            layer.ctx.rng.bit_generator.state = st["rng"]
            if "metrics" in st:
                layer._metric_sum.clear()
                layer._metric_count.clear()
                for k, v, n in st["metrics"]:
                    layer._metric_sum[k] = float(v)
                    layer._metric_count[k] = int(n)
