"""Checkpoints in SINGA 0.3's format, plus what exact resumption needs (§6).

``WORKSPACE/checkpoint/step<S>-worker<W>`` is a serialized ``singa.BlobProtos``: for every
owner Param its runtime name (``0#w1``), version and blob (shape + float data). SINGA 0.3
can read it and we can read SINGA's. Beside it, ``step<S>-worker<W>.state.npz`` holds what
SINGA never saved and an exact resume needs: the updater's history arrays, the layers'
data cursors and random-generator states, the step, the seed, the updater type and the
plugin versions that produced it. It is an ``.npz`` read with ``allow_pickle=False``.

Every file is written atomically (:class:`singa_core.running.fileio.AtomicFile`): a temporary
file in the same folder, flushed and fsync'ed, then renamed over the final name. Files are
written and read streaming, one Param (or updater-history array) at a time in pieces of
:data:`CHUNK_BYTES`, hashed on the way: a checkpoint may be of any size and costs about one
Param of memory beyond the Params themselves. The state
file is written first, so a params file whose state file exists is always complete.

Verification. ``step<S>-worker<W>.manifest.json`` records the size and SHA-256 of both
files (the BlobProtos bytes stay exactly SINGA's format), when and by which run (the
workspace lock's record: pid, host, start time, command) the checkpoint was written. The
write order makes every checkpoint singa writes verifiable: the state file, then the params
file to its temporary name, then the manifest, and only then the params file is renamed to
its final name, so no params file of singa's exists without its manifest (a kill leaves a
state file and a manifest without params: no checkpoint). Every read checks a file against
its manifest and refuses a mismatch (exit 2, naming the file, the expected and the found
digest). A file without a manifest (written by SINGA 0.3 or by hand, or a manifest lost) is
used after a structural check (it must parse completely and hold at least one Param) with a
one-line warning that it cannot be verified. :func:`find_resume` picks the checkpoint
``--resume`` continues from: never one without a manifest when one with a manifest exists,
and it refuses a damaged newest one, naming the newest intact one. :func:`checkpoint_info`
says which checkpoint a command uses (:class:`CheckpointInfo`).

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
import time
import warnings
import zipfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from singa_core.contracts.device import to_host
from singa_core.contracts.errors import SingaError, SingaWarning
from singa_core.contracts.layer import load_metric_state, metric_state
from singa_core.contracts.param import DTYPE
from singa_core.running.fileio import (
    atomic_write_bytes,
    not_a_file_problem,
    open_regular,
    read_regular_bytes,
    read_regular_text,
)

_STEP_FILE = re.compile(r"^step(\d+)-worker(\d+)$")
_KEEP_FILE = re.compile(r"^step(\d+)\.keep$")
# temporary files of fileio.AtomicFile (".NAME.XXXXXXXX.tmp") and the layer states the shm
# engine's partitions hand to worker 0 (".step<S>-part<W>.layers.json")
_STALE_FILE = re.compile(r"^\..+\.[a-z0-9_]{8}\.tmp$|^\.step\d+-part\d+\.layers\.json$")
STATE_SUFFIX = ".state.npz"
MANIFEST_SUFFIX = ".manifest.json"
MANIFEST_FORMAT = "singa-checkpoint-manifest/2"
#: manifests of earlier singa versions: these keys exactly, no provenance, no own digest
MANIFEST_FORMAT_1 = "singa-checkpoint-manifest/1"


def _manifest_digest(doc: dict) -> str:
    """The SHA-256 a manifest carries of itself (every key but ``digest``, canonical JSON):
    a flipped byte anywhere in it that still parses is caught too."""
    rest = {k: v for k, v in doc.items() if k != "digest"}
    return hashlib.sha256(
        json.dumps(rest, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()


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


def _int32(n: int) -> int:
    n &= (1 << 64) - 1
    n &= 0xFFFFFFFF
    return n - (1 << 32) if n >= 1 << 31 else n


#: bytes handed to the file (and the digest) at a time when a Param is written
CHUNK_BYTES = 16 << 20


def _f32(value: np.ndarray) -> np.ndarray:
    """``value`` as contiguous little-endian float32: itself when it already is (the usual
    case: no copy), else one copy of this one Param."""
    return np.ascontiguousarray(value, dtype="<f4")


def _param_pieces(records: list[ParamRecord]):
    """The pieces of a ``singa.BlobProtos`` in order: small header ``bytes`` and each
    Param's float data as a byte memoryview of its own array (never copied whole)."""
    head = bytearray()
    for r in records:
        name = r.name.encode()
        head += b"\x22" + _varint(len(name)) + name
    for r in records:
        head += b"\x18" + _varint(int(r.version))
    yield bytes(head)
    for r in records:
        arr = _f32(to_host(r.value))  # a device's values: one copy to the host
        n = arr.size * 4
        blob = bytearray()
        for s_ in r.value.shape:
            blob += b"\x08" + _varint(int(s_))
        blob += b"\x12" + _varint(n)
        yield b"\x2a" + _varint(len(blob) + n) + bytes(blob)
        raw = memoryview(arr.reshape(-1)).cast("B")
        for i in range(0, n, CHUNK_BYTES):
            yield raw[i : i + CHUNK_BYTES]


def encode_params(records: list[ParamRecord]) -> bytes:
    """Serialize a ``singa.BlobProtos`` (wire-compatible; float data packed as SINGA does).

    Encoded by hand because going through Python protobuf containers costs seconds for the
    ~10M floats of the MNIST MLP. Checkpoints are written piece by piece instead
    (:func:`write_checkpoint`), never as one bytes object.
    """
    return b"".join(bytes(p) for p in _param_pieces(records))


def checkpoint_write_bytes(params) -> int:
    """Memory a checkpoint write needs beyond the Params and updater state: one piece of an
    array in flight — the bytes the hashing writer copies of a Param's piece, or numpy's
    ``tobytes`` of an updater array's, one at a time: 16 MiB, or the largest array when it is
    smaller (a LeNet's piece is its 1.6 MB weight, not 16 MiB) — and 1 MiB of file and zip
    buffers, plus one copy of the largest Param that is not already contiguous float32
    (none, usually). Measured (``benchmarks/memory_estimate.py``'s runs under tracemalloc,
    issue 31): the MNIST MLP's write peaks 17.0 MiB above the memory before it, LeNet's
    2.5 MiB, CIFAR-10's 1.2 MiB, as this formula says."""
    largest = max((int(p.value.size) * 4 for p in params), default=0)
    piece = min(CHUNK_BYTES, largest)
    copy = max(
        (
            int(p.value.size) * 4
            for p in params
            if not (p.value.dtype == np.float32 and p.value.flags.c_contiguous)
        ),
        default=0,
    )
    return piece + (1 << 20) + copy


class _HashingWriter:
    """A write-only, unseekable stream that hashes and counts what goes through it to an
    :class:`~singa_core.running.fileio.AtomicFile` (zipfile then writes data descriptors
    instead of seeking back, so ``np.savez`` streams too)."""

    def __init__(self, out) -> None:
        self.out = out
        self.sha = hashlib.sha256()
        self.n = 0

    def write(self, data) -> int:
        if not isinstance(data, bytes):
            # a view of live values (Hogwild's servers write the shared Params while a
            # worker checkpoints them): hash and write one copy, so the digest is of the
            # bytes on disk (one chunk of at most CHUNK_BYTES at a time)
            data = bytes(memoryview(data).cast("B"))
        self.sha.update(data)
        self.out.write(data)
        self.n += len(data)
        return len(data)

    def tell(self) -> int:
        return self.n

    def seek(self, *args):
        raise io.UnsupportedOperation("seek")

    def seekable(self) -> bool:
        return False

    def read(self, *args):  # numpy opens a path unless the object has `read`
        raise io.UnsupportedOperation("read")

    def flush(self) -> None:
        pass


def _write_streamed(path: Path, fill, *, then=None) -> dict:
    """Write ``path`` atomically through ``fill(writer)``; its ``{"bytes", "sha256"}``.
    ``then(entry)`` runs after the bytes are written and before the file gets its final name
    (the manifest is written there: no params file exists without its manifest)."""
    from singa_core.running.fileio import AtomicFile

    out = AtomicFile(str(path), "checkpoint file")
    try:
        w = _HashingWriter(out)
        fill(w)
        entry = {"bytes": w.n, "sha256": w.sha.hexdigest()}
        if then is not None:
            out.flush()
            then(entry)
        out.commit()
    except BaseException:
        out.abort()
        raise
    return entry


class _Reader:
    """Sequential reads of a checkpoint with exact lengths (a short read is truncation)."""

    def __init__(self, fh, size: int) -> None:
        self.fh = fh
        self.pos = 0
        self.size = size

    def read(self, n: int) -> bytes:
        if n < 0 or self.pos + n > self.size:
            raise ValueError("truncated file")
        data = self.fh.read(n)
        if len(data) != n:
            raise ValueError("truncated file")
        self.pos += n
        return data

    def read_into(self, arr: np.ndarray) -> None:
        view = memoryview(arr.reshape(-1)).cast("B")
        if self.pos + len(view) > self.size:
            raise ValueError("truncated float data")
        got = 0
        while got < len(view):
            k = self.fh.readinto(view[got : got + CHUNK_BYTES])
            if not k:
                raise ValueError("truncated float data")
            got += k
        self.pos += got

    def varint(self) -> int:
        result = shift = 0
        while True:
            b = self.read(1)[0]
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 63:
                raise ValueError("varint too long")

    def skip(self, wire: int) -> None:
        if wire == 0:
            self.varint()
        elif wire == 1:
            self.read(8)
        elif wire == 2:
            n = self.varint()
            if self.pos + n > self.size:
                raise ValueError("truncated field")
            self.fh.seek(n, io.SEEK_CUR)
            self.pos += n
        elif wire == 5:
            self.read(4)
        else:
            raise ValueError(f"unsupported wire type {wire}")


def _read_blob(r: _Reader, end: int) -> tuple[tuple[int, ...], np.ndarray]:
    """One BlobProto ending at byte ``end``: its shape and its float data, read straight
    into a new array (one Param's worth of memory)."""
    shape: list[int] = []
    chunks: list[np.ndarray] = []
    singles: list[float] = []
    while r.pos < end:
        key = r.varint()
        fnum, wire = key >> 3, key & 7
        if fnum == 1 and wire == 0:
            shape.append(_int32(r.varint()))
        elif fnum == 1 and wire == 2:
            stop = r.pos + r.varint()
            while r.pos < stop:
                shape.append(_int32(r.varint()))
        elif fnum == 2 and wire == 2:
            n = r.varint()
            if n % 4 or r.pos + n > end:
                raise ValueError("truncated float data")
            arr = np.empty(n // 4, dtype="<f4")
            r.read_into(arr)
            chunks.append(arr)
        elif fnum == 2 and wire == 5:
            singles.append(float(np.frombuffer(r.read(4), dtype="<f4")[0]))
        else:
            r.skip(wire)
    if r.pos != end:
        raise ValueError("truncated blob")
    if singles:
        chunks.append(np.asarray(singles, dtype="<f4"))
    if len(chunks) == 1:
        data = chunks[0]
    else:
        data = np.concatenate(chunks) if chunks else np.zeros(0, dtype="<f4")
    if data.dtype != DTYPE:
        data = data.astype(DTYPE)
    return tuple(shape), data


def _record(name: str, version: int, shape, arr: np.ndarray, path: str) -> ParamRecord:
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
    return ParamRecord(name, version, arr.reshape(shape) if shape else arr)


def _iter_stream(fh, size: int, path: str):
    """The Params of a ``singa.BlobProtos`` stream, one at a time. Names and versions come
    before the blobs (ours, and protobuf's field order in SINGA's); a blob that comes before
    its name is held until the name arrives."""
    r = _Reader(fh, size)
    names: list[str] = []
    versions: list[int] = []
    held: list[tuple[tuple[int, ...], np.ndarray]] = []
    nblobs = 0
    try:
        while r.pos < size:
            key = r.varint()
            fnum, wire = key >> 3, key & 7
            if fnum == 4 and wire == 2:
                names.append(r.read(r.varint()).decode())
            elif fnum == 3 and wire == 0:
                versions.append(_int32(r.varint()))
            elif fnum == 3 and wire == 2:
                stop = r.pos + r.varint()
                while r.pos < stop:
                    versions.append(_int32(r.varint()))
            elif fnum == 5 and wire == 2:
                n = r.varint()
                if r.pos + n > size:
                    raise ValueError("truncated blob")
                shape, arr = _read_blob(r, r.pos + n)
                i = nblobs
                nblobs += 1
                if i < len(names) and not held:
                    v = versions[i] if i < len(versions) else 0
                    yield _record(names[i], v, shape, arr, path)
                else:
                    held.append((shape, arr))
            else:
                r.skip(wire)
    except (ValueError, IndexError, UnicodeDecodeError) as exc:
        raise SingaError(
            f"not a valid SINGA checkpoint (BlobProtos): {exc}",
            where=path,
            help="checkpoint files are WORKSPACE/checkpoint/step<S>-worker<W>; "
            "a damaged file must be removed to resume from an earlier one",
        ) from None
    if len(names) != nblobs:
        raise SingaError(
            f"corrupt checkpoint: {len(names)} names but {nblobs} blobs",
            where=path,
            help="the file is damaged; use an earlier checkpoint",
        )
    first_held = nblobs - len(held)
    for j, (shape, arr) in enumerate(held):
        i = first_held + j
        v = versions[i] if i < len(versions) else 0
        yield _record(names[i], v, shape, arr, path)


def decode_params(data: bytes, path: str) -> list[ParamRecord]:
    """Parse a ``singa.BlobProtos`` checkpoint (SINGA's or ours) held in memory."""
    return list(_iter_stream(io.BytesIO(data), len(data), path))


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
    doc = read_manifest_doc(params_path)
    return None if doc is None else doc["files"]


def read_manifest_doc(params_path: str | Path) -> dict | None:
    """The whole manifest beside a checkpoint (files, step, worker, when and by which run it
    was written), checked; None when it has none."""
    mp = manifest_path(params_path)
    try:
        raw = read_regular_bytes(mp, "checkpoint manifest")  # a FIFO is refused, not waited on
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
        if not isinstance(doc, dict):
            raise ValueError(f"not a {MANIFEST_FORMAT} document")
        if doc.get("format") == MANIFEST_FORMAT_1:
            if set(doc) != {"format", "step", "worker", "files"}:
                raise ValueError(f"not a {MANIFEST_FORMAT_1} document: keys {sorted(doc)}")
        elif doc.get("format") != MANIFEST_FORMAT:
            raise ValueError(f"not a {MANIFEST_FORMAT} document")
        elif doc.get("digest") != _manifest_digest(doc):
            raise ValueError("its own SHA-256 does not match its content")
        files = doc["files"]
        for name, entry in files.items():
            if not (
                isinstance(name, str)
                and isinstance(entry.get("bytes"), int)
                and re.fullmatch(r"[0-9a-f]{64}", str(entry.get("sha256")))
            ):
                raise ValueError(f"bad entry for {name!r}")
        m = _STEP_FILE.match(Path(params_path).name)
        if m and (doc.get("step"), doc.get("worker")) != (int(m.group(1)), int(m.group(2))):
            raise ValueError(
                f"it is for step {doc.get('step')} worker {doc.get('worker')}, "
                f"not step {m.group(1)} worker {m.group(2)}"
            )
        written = doc.get("written")
        if written is not None and not isinstance(written, (int, float)):
            raise ValueError("bad 'written' time")
        if not isinstance(doc.get("run", {}), dict):
            raise ValueError("bad 'run' record")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise SingaError(
            f"damaged checkpoint manifest: {exc}",
            where=str(mp),
            help="the manifest records the SHA-256 of the checkpoint's files; use an earlier "
            "checkpoint (`singa train --resume-from STEP`), or delete the manifest to load "
            "the files after a structural check only",
        ) from None
    return doc


def _file_size(p: Path, what: str) -> int:
    try:
        size = p.stat().st_size
    except FileNotFoundError:
        raise SingaError(
            f"{what} not found",
            where=str(p),
            help="checkpoint_path lists files like WORKSPACE/checkpoint/step1000-worker0; "
            "resuming needs both step<S>-worker<W> and its .state.npz",
        ) from None
    except OSError as exc:
        raise SingaError(
            f"cannot read {what}: {exc.strerror or exc}",
            where=str(p),
            help="check the file's permissions and the disk (the kernel log names I/O errors)",
        ) from None
    if p.is_dir():
        raise SingaError(
            f"{what} is a folder",
            where=str(p),
            help="give a checkpoint file such as WORKSPACE/checkpoint/step1000-worker0",
        )
    problem = not_a_file_problem(p.stat().st_mode)
    if problem is not None:  # a FIFO would block the read below until a writer appeared
        raise SingaError(
            f"{what} {p} {problem}",
            where=str(p),
            help="a checkpoint is regular files (step<S>-worker<W>, its .state.npz and "
            ".manifest.json); remove what is there instead, or pick another step",
        )
    return size


def _open(p: Path, what: str):
    """``p`` opened for reading; anything but a regular file is refused without blocking
    (:func:`~singa_core.running.fileio.open_regular`)."""
    try:
        return open_regular(p, what, buffering=1 << 20)
    except FileNotFoundError:
        raise SingaError(
            f"{what} not found",
            where=str(p),
            help="it was there a moment ago: another process removed it; try again",
        ) from None


def verify_file(path: str | Path, what: str = "checkpoint file") -> int:
    """Check a checkpoint file against its manifest, when it has one, reading it in chunks
    (any size, constant memory); returns its size. Raises SingaError naming a damaged file."""
    p = Path(path)
    size = _file_size(p, what)
    files = read_manifest(_params_path_of(p))
    if files is None:
        warn_unverified(p, what)
        return size
    entry = files.get(p.name)
    if entry is None:
        raise SingaError(
            f"{what} is not listed in its manifest {manifest_path(_params_path_of(p))}",
            where=str(path),
            help=_DAMAGED_HELP,
        )
    sha, n = hashlib.sha256(), 0
    with _open(p, what) as fh:
        try:
            while chunk := fh.read(CHUNK_BYTES):
                sha.update(chunk)
                n += len(chunk)
        except OSError as exc:
            raise SingaError(
                f"cannot read {what}: {exc.strerror or exc}",
                where=str(path),
                help="check the file's permissions and the disk (the kernel log names I/O errors)",
            ) from None
    found = sha.hexdigest()
    if found != entry["sha256"] or n != entry["bytes"]:
        raise SingaError(
            f"{what} is damaged: expected SHA-256 {entry['sha256']} ({entry['bytes']} "
            f"bytes, from its manifest), found {found} ({n} bytes)",
            where=str(path),
            help=_DAMAGED_HELP,
        )
    return n


def warn_unverified(path: str | Path, what: str = "checkpoint file") -> None:
    """The one-line warning for a file used without a manifest to verify it against."""
    warnings.warn(
        f"{what} {path} cannot be verified: it has no manifest "
        f"({manifest_path(_params_path_of(Path(path))).name}; a SINGA 0.3 or hand-made "
        "checkpoint); it is used after a structural check only",
        SingaWarning,
        stacklevel=3,
    )


def read_checkpoint_bytes(path: str | Path, what: str = "checkpoint file") -> bytes:
    """The bytes of a (small) checkpoint file, checked against its manifest when it has one.
    Checkpoints themselves are read streaming (:func:`iter_params`)."""
    verify_file(path, what)
    with _open(Path(path), what) as fh:
        return fh.read()


def iter_params(path: str | Path):
    """The Params of a BlobProtos checkpoint one at a time (memory: one Param), after the
    file is verified against its manifest (else checked for structure as it is read); a
    file holding no Param (empty, or not a checkpoint) is an error."""
    p = Path(path)
    size = verify_file(p)
    count = 0
    with _open(p, "checkpoint file") as fh:
        try:
            for rec in _iter_stream(fh, size, str(path)):
                count += 1
                yield rec
        except OSError as exc:
            raise SingaError(
                f"cannot read checkpoint file: {exc.strerror or exc}",
                where=str(path),
                help="check the file's permissions and the disk (the kernel log names I/O errors)",
            ) from None
    if not count:
        raise SingaError(
            "checkpoint holds no Param" + (" (the file is empty)" if not size else ""),
            where=str(path),
            help="a checkpoint is a WORKSPACE/checkpoint/step<S>-worker<W> file written by "
            "SINGA or singa; use an earlier checkpoint or fix checkpoint_path",
        )


def read_params(path: str | Path) -> list[ParamRecord]:
    """The Params of a BlobProtos checkpoint: verified against its manifest, else checked
    for structure; a file holding no Param (empty, or not a checkpoint) is an error."""
    return list(iter_params(path))


def check_params_file(path: str | Path) -> None:
    """Verify a params file without keeping its values: against the manifest when it has
    one (digest only), else by parsing it through (one Param at a time)."""
    if read_manifest(_params_path_of(Path(path))) is not None:
        verify_file(path)
        return
    for _ in iter_params(path):
        pass


def _fill_state(state: TrainingState):
    meta = dict(state.meta, step=state.step)
    arrays = {f"a/{k}": to_host(v) for k, v in state.arrays.items()}
    arrays["meta"] = np.frombuffer(json.dumps(meta, sort_keys=True).encode(), dtype=np.uint8)

    def fill(w) -> None:
        np.savez(w, **arrays)  # streams each array in 16 MiB pieces (numpy's write_array)

    return fill


def encode_state(state: TrainingState) -> bytes:
    buf = io.BytesIO()
    _fill_state(state)(buf)
    return buf.getvalue()


_STATE_ERRORS = (
    OSError,
    ValueError,
    KeyError,
    EOFError,
    zipfile.BadZipFile,
    zlib.error,
    NotImplementedError,  # zipfile: an unsupported compression, version or flag
    RuntimeError,  # zipfile: "is encrypted, password required"
)


def _corrupt_state(path, exc) -> SingaError:
    return SingaError(
        f"corrupt training-state file: {exc}",
        where=str(path),
        help="the file is damaged; resume from an earlier checkpoint with "
        "`singa train --resume-from STEP`",
    )


class StateArrays(Mapping):
    """The updater-history arrays of a verified training-state file, read one at a time
    when asked for (``arrays[name]``), so a resume never holds them all twice."""

    def __init__(self, path: str | Path, names: list[str]) -> None:
        self.path = str(path)
        self._names = names

    def __getitem__(self, key: str) -> np.ndarray:
        if key not in self._names:
            raise KeyError(key)
        try:
            with _open(Path(self.path), "training-state file") as fh:
                with np.load(fh, allow_pickle=False) as z:
                    return z[f"a/{key}"]
        except _STATE_ERRORS as exc:
            raise _corrupt_state(self.path, exc) from None

    def __iter__(self):
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def _load_state(
    path: str | Path, with_arrays: bool, lazy: bool = False
) -> tuple[dict, Mapping[str, np.ndarray]]:
    verify_file(path, "training-state file")
    try:
        with _open(Path(path), "training-state file") as fh, np.load(fh, allow_pickle=False) as z:
            meta = json.loads(bytes(z["meta"]).decode())
            if not isinstance(meta, dict) or not isinstance(meta.get("step"), int):
                raise ValueError("its metadata has no step")
            names = [k[2:] for k in z.files if k.startswith("a/")]
            if not with_arrays:
                arrays: Mapping[str, np.ndarray] = {}
            elif lazy:
                arrays = StateArrays(path, names)
            else:
                arrays = {k: z[f"a/{k}"] for k in names}
    except _STATE_ERRORS as exc:
        raise _corrupt_state(path, exc) from None
    return meta, arrays


def read_state(path: str | Path, *, lazy: bool = False) -> TrainingState:
    """The training state; ``lazy``: its arrays are a :class:`StateArrays`, each read when
    used (what the engines resume with: one updater-history array in memory at a time)."""
    meta, arrays = _load_state(path, with_arrays=True, lazy=lazy)
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
    params to a temporary name, their manifest, then the params under their final name,
    each atomically (no params file without its manifest). Every engine writes through here.

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
    # an older run's manifest must never vouch for this run's files, and no params file may
    # stand without its manifest: the old params go first, then the old manifest
    for old, what in ((path, "checkpoint file"), (man, "checkpoint manifest")):
        try:
            old.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise SingaError(
                f"cannot replace {what}: {exc.strerror or exc}",
                where=str(old),
                help="check the checkpoint folder's permissions",
            ) from None
    # streamed: the state's arrays and each Param's values go to the files (and their
    # digests) in pieces; memory beyond the arrays themselves is a few buffers
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SingaError(
            f"cannot create the checkpoint folder: {exc.strerror or exc}",
            where=str(d),
            help="check that the workspace is a writable folder",
        ) from None
    state_entry = _write_streamed(state_path, _fill_state(state))

    def fill_params(w) -> None:
        for piece in _param_pieces(params):
            w.write(piece)

    def write_manifest(params_entry: dict) -> None:
        doc = {
            "format": MANIFEST_FORMAT,
            "step": int(step),
            "worker": int(worker),
            "written": round(time.time(), 3),
            "run": _run_record(workspace),
            "files": {path.name: params_entry, state_path.name: state_entry},
        }
        doc["digest"] = _manifest_digest(doc)
        data = (json.dumps(doc, indent=1) + "\n").encode()
        atomic_write_bytes(man, data, "checkpoint manifest")

    _write_streamed(path, fill_params, then=write_manifest)
    if keep > 0:
        prune_checkpoints(workspace, keep, newest=step)
    return path


def _run_record(workspace: str | Path) -> dict:
    """The run writing into ``workspace``: what its lock holder recorded (pid, host, start
    time, command: ``WORKSPACE/.singa.lock.json``, written by running/workspace.py, read
    here without importing it), or this process's pid and host when nobody holds it."""
    import os
    import socket

    try:
        holder = json.loads(read_regular_text(Path(workspace) / ".singa.lock.json", "lock record"))
    except (OSError, ValueError, SingaError):
        holder = {}
    if not isinstance(holder, dict):
        holder = {}
    keep = {k: holder[k] for k in ("pid", "host", "started", "command") if k in holder}
    return keep or {"pid": os.getpid(), "host": socket.gethostname()}


def _when(t) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


@dataclass
class CheckpointInfo:
    """Which checkpoint a command uses: its params file, step, when it was written and the
    run that wrote it (from the manifest), and whether it can be verified (has a manifest).
    ``str()`` is the line ``singa predict``/``test``/``export`` print."""

    path: Path
    step: int | None
    written: float | None
    run: dict = field(default_factory=dict)
    verified: bool = False
    notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        parts = [f"step {self.step}" if self.step is not None else "step unknown"]
        if self.written is not None:
            parts.append(f"written {_when(self.written)}")
        run = self.run
        if run:
            by = "by the run"
            if isinstance(run.get("started"), (int, float)):
                by += f" started {_when(run['started'])}"
            if run.get("pid") is not None:
                by += f" (pid {run['pid']}"
                by += f", `{run['command']}`)" if run.get("command") else ")"
            parts.append(by)
        if not self.verified:
            parts.append("no manifest: not verifiable")
        return f"{self.path} ({', '.join(parts)})"

    def __str__(self) -> str:
        return self.describe()


def checkpoint_info(path: str | Path) -> CheckpointInfo:
    """What :class:`CheckpointInfo` says about the params file ``path`` (its manifest when
    it has one, else the step of its name or state file and the file's time)."""
    p = Path(path)
    doc = None
    try:
        doc = read_manifest_doc(p)
    except SingaError:
        pass  # a damaged manifest: the load itself says so
    if doc is not None:
        return CheckpointInfo(
            p, doc.get("step"), doc.get("written"), dict(doc.get("run") or {}), True
        )
    step = None
    m = _STEP_FILE.match(p.name)
    if m:
        step = int(m.group(1))
    try:
        written = p.stat().st_mtime
    except OSError:
        written = None
    return CheckpointInfo(p, step, written, {}, False)


def moved_aside_note(workspace: str | Path, step: int | None) -> str | None:
    """A note when a folder an earlier run's checkpoints were moved to
    (``checkpoint.before-*``) holds a later step than ``step`` (the workspace's newest):
    the model in use may come from a shorter run than one moved aside."""
    ws = Path(workspace)
    if step is None or not ws.is_dir():
        return None
    best = None
    for d in sorted(ws.glob("checkpoint.before-*")):
        if not d.is_dir():
            continue
        steps = []
        for f in d.iterdir():
            m = _STEP_FILE.match(f.name)
            if m and Path(str(f) + STATE_SUFFIX).exists():
                steps.append((int(m.group(1)), f))
        if steps:
            top = max(steps)
            if top[0] > step and (best is None or top[0] > best[0]):
                best = top
    if best is None:
        return None
    return (
        f"note: this is step {step}, but {best[1].parent} holds step {best[0]} of an earlier, "
        f"longer run (moved aside when a new run started in this workspace); use it with "
        f"--checkpoint {best[1]}"
    )


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
        check_params_file(f)
        m = read_state_meta(str(f) + STATE_SUFFIX)
        meta = m if meta is None else meta
    return meta or {}


def _has_manifest(files: list[Path]) -> bool:
    return all(manifest_path(f).exists() for f in files)


def marked_steps(workspace: str | Path) -> set[int]:
    """Steps the user marked to keep (``touch WORKSPACE/checkpoint/step<S>.keep``)."""
    d = checkpoint_dir(workspace)
    if not d.is_dir():
        return set()
    return {int(m.group(1)) for f in d.iterdir() if (m := _KEEP_FILE.match(f.name))}


@dataclass
class ChosenCheckpoint:
    """The checkpoint :func:`choose_checkpoint` picked: its step, params files, the
    training-state metadata of the first, and whether every file was verified against its
    manifest (False: no manifest, checked for structure only)."""

    step: int
    files: list[Path]
    meta: dict
    verified: bool


def _trained_aside(workspace: Path) -> tuple[int, Path] | None:
    """The newest step above 0 in a folder an earlier run's checkpoints were moved to
    (``WORKSPACE/checkpoint.before-*``), with its first params file, or None."""
    best = None
    for d in sorted(workspace.glob("checkpoint.before-*")):
        if not d.is_dir():
            continue
        for f in d.iterdir():
            m = _STEP_FILE.match(f.name)
            if m and int(m.group(1)) > 0 and Path(str(f) + STATE_SUFFIX).exists():
                if best is None or int(m.group(1)) > best[0]:
                    best = (int(m.group(1)), f)
    return best


def choose_checkpoint(
    workspace: str | Path, step: int | None = None, *, resume: bool = False
) -> ChosenCheckpoint | None:
    """THE rule for which checkpoint of ``workspace`` a command uses when none is named:
    ``singa train --resume``, ``singa test``, ``singa predict``, ``singa export`` and
    ``Job.model()`` all call this (docs/guide/checkpoints.md, "Which checkpoint").

    * ``step`` given (``--resume-from STEP``): that step, verified; else
    * the newest step whose files all have a manifest wins over newer ones without (which
      cannot be verified), with a warning naming the steps passed over; when no step has a
      manifest, the newest;
    * an untrained step-0 checkpoint is never taken silently while a trained one exists
      (a newer one without manifest here, or one an earlier run's start moved aside to
      ``checkpoint.before-*``): that is an error naming both, whose help says how to ask
      for either explicitly;
    * the choice is verified (digests, else structure); a damaged one is refused, naming
      the newest intact one.

    None when the workspace has no complete checkpoint. ``resume`` words the messages for
    ``--resume`` (``--resume-from STEP``) instead of ``--checkpoint FILE``."""
    ws = Path(workspace)
    d = checkpoint_dir(ws)
    steps = checkpoint_steps(ws)
    if not steps:
        return None

    def pick(s: int) -> str:
        return f"--resume-from {s}" if resume else f"--checkpoint {steps[s][0]}"

    if step is not None:
        if step not in steps:
            raise SingaError(
                f"{'--resume-from' if resume else 'checkpoint step'} {step}: {d} has no "
                f"complete checkpoint of step {step}",
                where=str(d),
                help="steps there: " + ", ".join(str(s) for s in sorted(steps)),
            )
        files = steps[step]
        return ChosenCheckpoint(step, files, verify_checkpoint(files), _has_manifest(files))
    newest = max(steps)
    # a checkpoint of singa's own without its manifest cannot be verified: never take it
    # while one that can be verified exists (the write order makes it something a kill
    # under an older singa, or a lost manifest, left)
    verifiable = [s for s in sorted(steps, reverse=True) if _has_manifest(steps[s])]
    skipped: list[int] = []
    if verifiable and verifiable[0] != newest:
        skipped = sorted(s for s in steps if s > verifiable[0])
        newest = verifiable[0]
    if newest == 0:
        trained = None
        if skipped:
            trained = (skipped[-1], steps[skipped[-1]][0], "has no manifest (not verifiable)")
        else:
            aside = _trained_aside(ws)
            if aside is not None:
                trained = (aside[0], aside[1], "was moved aside when a new run started")
        if trained is not None:
            s, f, why = trained
            other = f"--resume-from {s}" if resume and f.parent == d else f"--checkpoint {f}"
            if resume and f.parent != d:
                other = f"move {d} away and {f.parent} back to {d}, then --resume"
            raise SingaError(
                f"the checkpoint to use by default is step 0, an untrained model, but {f} "
                f"holds step {s}, a trained one that {why}",
                where=str(d),
                help=f"ask for one explicitly: {other} for the trained model, or "
                f"{pick(0)} for the untrained one",
            )
    if skipped:
        warnings.warn(
            f"{'--resume: ' if resume else ''}the checkpoint(s) of step "
            f"{', '.join(map(str, skipped))} in {d} have no manifest and cannot be verified; "
            f"{'continuing from' if resume else 'using'} step {newest}, the newest verifiable "
            f"one ({'--resume-from STEP' if resume else '--checkpoint FILE'} picks another)",
            SingaWarning,
            stacklevel=3,
        )
    try:
        meta = verify_checkpoint(steps[newest])
    except SingaError as err:
        intact = None
        for s in sorted(verifiable or steps, reverse=True):
            if s >= newest:
                continue
            try:
                verify_checkpoint(steps[s])
            except SingaError:
                continue
            intact = s
            break
        if intact is None:
            note = "no older checkpoint is intact"
            help_ = (
                "start a new run without --resume"
                if resume
                else "train again, or give --checkpoint FILE of another run"
            )
        else:
            note = f"the newest intact checkpoint is step {intact} ({steps[intact][0]})"
            help_ = (
                f"continue from it with `singa train --resume-from {intact}`"
                if resume
                else f"use it with {pick(intact)}"
            )
        raise SingaError(
            f"the newest checkpoint (step {newest}) is damaged: {err.message}",
            where=err.where,
            notes=[note],
            help=help_,
        ) from None
    return ChosenCheckpoint(newest, steps[newest], meta, newest in verifiable)


def find_resume(workspace: str | Path, step: int | None = None) -> tuple[int, list[Path], dict]:
    """(step, param files, state metadata) of the checkpoint to resume from: ``step``, or
    the one :func:`choose_checkpoint` picks."""
    chosen = choose_checkpoint(workspace, step, resume=True)
    if chosen is None:
        raise SingaError(
            f"--resume: no checkpoint in {checkpoint_dir(workspace)}",
            where=str(workspace),
            help="train without --resume first, with checkpoint_freq > 0 to save along the way",
        )
    return chosen.step, chosen.files, chosen.meta


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
        # read one Param at a time into the net (a checkpoint of any size: memory is the
        # net's Params plus one); shapes are checked before a value is copied
        held, matched = [], 0
        for rec in iter_params(f):
            held.append(rec.name)
            p = by_name.get(plain_param_name(rec.name))
            if p is None:
                continue
            matched += 1
            if tuple(rec.value.shape) != p.shape and rec.value.size != p.size:
                raise SingaError(
                    f"param '{p.name}' has shape {p.shape} in the net but "
                    f"{tuple(rec.value.shape)} in the checkpoint",
                    where=str(f),
                    help="the checkpoint was written by a different net; remove it from "
                    "checkpoint_path or fix the layer sizes",
                )
            value = rec.value.reshape(p.shape)
            p.value[...] = value if p.device.is_host else p.device.asarray(value)
            p.version = start_step if reset_version else rec.version
            loaded.add(p.name)
        if not matched:
            raise SingaError(
                "checkpoint holds none of this net's Params",
                where=str(f),
                notes=[
                    "it holds: " + _some(held),
                    "the net's Params: " + _some(by_name),
                ],
                help="the checkpoint was written by another net; remove it from "
                "checkpoint_path (or --checkpoint) or give this net's checkpoint",
            )
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
                "metrics": metric_state(layer),
                "draws": list(layer._draws),  # the step's random draws made so far
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
                load_metric_state(layer, st["metrics"])
            layer._draws = list(st.get("draws", (-1, 0)))
