"""Checkpoints in SINGA 0.3's format, plus what exact resumption needs (§6).

``WORKSPACE/checkpoint/step<S>-worker<W>`` is a serialized ``singa.BlobProtos``: for every
owner Param its runtime name (``0#w1``), version and blob (shape + float data). SINGA 0.3
can read it and we can read SINGA's. Beside it, ``step<S>-worker<W>.state.npz`` holds what
SINGA never saved and an exact resume needs: the updater's history arrays, the layers'
data cursors and random-generator states, the step, the seed, the updater type and the
plugin versions that produced it. It is an ``.npz`` read with ``allow_pickle=False``.

Every file is written atomically (:func:`singa_core.fileio.atomic_write_bytes`): a temporary
file in the same folder, flushed and fsync'ed, then renamed over the final name. The state
file is written first, so a params file whose state file exists is always complete.
"""

from __future__ import annotations

import io
import json
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from singa_core.errors import SingaError
from singa_core.fileio import atomic_write_bytes
from singa_core.param import DTYPE

_STEP_FILE = re.compile(r"^step(\d+)-worker(\d+)$")
STATE_SUFFIX = ".state.npz"
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


def read_params(path: str | Path) -> list[ParamRecord]:
    p = Path(path)
    try:
        size = p.stat().st_size
    except FileNotFoundError:
        raise SingaError(
            "checkpoint file not found",
            where=str(path),
            help="checkpoint_path lists files like WORKSPACE/checkpoint/step1000-worker0",
        ) from None
    if size > MAX_CHECKPOINT_BYTES:
        raise SingaError(
            f"checkpoint is larger than {MAX_CHECKPOINT_BYTES >> 20} MB",
            where=str(path),
            help="is this really a SINGA checkpoint?",
        )
    return decode_params(p.read_bytes(), str(path))


def encode_state(state: TrainingState) -> bytes:
    meta = dict(state.meta, step=state.step)
    buf = io.BytesIO()
    arrays = {f"a/{k}": v for k, v in state.arrays.items()}
    arrays["meta"] = np.frombuffer(json.dumps(meta, sort_keys=True).encode(), dtype=np.uint8)
    np.savez(buf, **arrays)
    return buf.getvalue()


def _load_state(path: str | Path, with_arrays: bool) -> tuple[dict, dict[str, np.ndarray]]:
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(bytes(z["meta"]).decode())
            arrays = {k[2:]: z[k] for k in z.files if k.startswith("a/")} if with_arrays else {}
    except FileNotFoundError:
        raise SingaError(
            "training-state file not found",
            where=str(path),
            help="resume needs both step<S>-worker<W> and its .state.npz",
        ) from None
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, json.JSONDecodeError) as exc:
        raise SingaError(
            f"corrupt training-state file: {exc}",
            where=str(path),
            help="the file is damaged; remove this step's files to resume "
            "from an earlier checkpoint",
        ) from None
    return meta, arrays


def read_state(path: str | Path) -> TrainingState:
    meta, arrays = _load_state(path, with_arrays=True)
    return TrainingState(step=int(meta.pop("step")), meta=meta, arrays=arrays)


def read_state_meta(path: str | Path) -> dict:
    """Only the metadata of a training-state file (cheap: arrays are not read)."""
    return _load_state(path, with_arrays=False)[0]


def checkpoint_dir(workspace: str | Path) -> Path:
    return Path(workspace) / "checkpoint"


def write_checkpoint(
    workspace: str | Path, step: int, worker: int, params: list[ParamRecord], state: TrainingState
) -> Path:
    d = checkpoint_dir(workspace)
    path = d / f"step{step}-worker{worker}"
    atomic_write_bytes(Path(str(path) + STATE_SUFFIX), encode_state(state), "checkpoint file")
    atomic_write_bytes(path, encode_params(params), "checkpoint file")
    return path


def latest_checkpoint(workspace: str | Path) -> tuple[int, list[Path]] | None:
    """The newest complete step in WORKSPACE/checkpoint: (step, [param files])."""
    d = checkpoint_dir(workspace)
    if not d.is_dir():
        return None
    steps: dict[int, list[Path]] = {}
    for f in d.iterdir():
        m = _STEP_FILE.match(f.name)
        if m and Path(str(f) + STATE_SUFFIX).exists():
            steps.setdefault(int(m.group(1)), []).append(f)
    if not steps:
        return None
    step = max(steps)
    return step, sorted(steps[step])


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
    from singa_core.net import plain_param_name

    by_name = {plain_param_name(p.name): p for p in params if p.is_owner}
    loaded: set[str] = set()
    for f in files:
        for rec in read_params(f):
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


def layer_states(nets: dict) -> dict:
    """JSON-able resumable state of every layer of ``nets`` (phase -> layer -> state)."""
    out = {}
    for phase, net in nets.items():
        out[str(phase)] = {
            layer.name: {"state": layer.state_dict(), "rng": layer.ctx.rng.bit_generator.state}
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
