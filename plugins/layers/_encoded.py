"""Decoding encoded records (kRecordInput with ``store_conf.encoded``), in this process or
in helper processes.

:func:`decode_rows` turns serialized RecordProtos whose ``pixel`` holds an image file into
float rows (a record with ``data`` floats keeps them). The prefetch thread of an encoded
kRecordInput sends its batches to helper processes (:func:`decode_rows_in_pool`) instead
of decoding in the thread: Pillow's per-image Python work would otherwise hold the GIL
against the training thread. The helpers are plain subprocesses (``python -m
singa_builtins.layers._encoded``) started on first use and ended at exit. The result is
the same array either way (the same function computes it).
"""

from __future__ import annotations

import atexit
import os
import struct
import sys
import threading

import numpy as np

from singa_core.errors import SingaError

#: the label of a record that has no label field (class indices are never negative)
NO_LABEL = np.iinfo(np.int32).min


def decode_rows(values: list[bytes], shape: tuple[int, int, int]):
    """``(rows float32 [n, C·H·W], labels int32 [n], problem)``; ``problem`` is None or
    ``(k, message)`` for the first record that does not decode into ``shape``; a record
    without a label field gets :data:`NO_LABEL`."""
    from google.protobuf.message import DecodeError
    from singa_builtins._imaging import decode

    from singa_core.schema import common_pb2

    n, size = len(values), int(np.prod(shape))
    rows = np.empty((n, size), dtype=np.float32)
    labels = np.zeros(n, dtype=np.int32)
    rec = common_pb2.RecordProto()
    for k, value in enumerate(values):
        try:
            rec.ParseFromString(value)
        except DecodeError:
            return rows, labels, (k, "is not a RecordProto")
        labels[k] = rec.label if rec.HasField("label") else NO_LABEL
        if len(rec.data):
            if len(rec.data) != size:
                return rows, labels, (k, f"has {len(rec.data)} data values, expected {size}")
            rows[k] = rec.data
            continue
        if not rec.pixel:
            return rows, labels, (k, "has no image bytes (store_conf.encoded is set)")
        try:
            image = decode(rec.pixel, shape[0])
        except ValueError as exc:
            return rows, labels, (k, str(exc))
        if image.shape != tuple(shape):
            return (
                rows,
                labels,
                (
                    k,
                    f"decodes to an image of {list(image.shape)}, but store_conf.shape is "
                    f"{list(shape)}",
                ),
            )
        rows[k] = image.reshape(-1)
    return rows, labels, None


# -- helper processes ---------------------------------------------------------------------------
# Each helper is `python -m singa_builtins.layers._encoded`, fed over its stdin/stdout: no
# multiprocessing, so nothing re-imports the user's main module and nothing is forked from
# a process with threads. Request: u32 C, H, W, n, then n x (u32 length, value). Answer:
# u32 0 + n·C·H·W float32 rows + n int32 labels, or u32 1 + u32 k + u32 length + message.
_U32 = struct.Struct("<I")
_HEAD = struct.Struct("<IIII")
_HELPERS: list | None = None
_HELPERS_LOCK = threading.Lock()


def decoder_workers() -> int:
    """Helper processes: the usable CPUs but one (the training's), at least 1, at most 4."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count() or 1
    return max(1, min(4, cpus - 1))


def _read_exact(stream, n: int) -> bytes:
    buf = stream.read(n)
    if buf is None or len(buf) != n:
        raise EOFError
    return buf


def serve(inp=None, out=None) -> None:
    """The helper's loop: answer requests until stdin closes."""
    inp = inp or sys.stdin.buffer
    out = out or sys.stdout.buffer
    while True:
        try:
            c, h, w, n = _HEAD.unpack(_read_exact(inp, _HEAD.size))
            values = []
            for _ in range(n):
                (length,) = _U32.unpack(_read_exact(inp, 4))
                values.append(_read_exact(inp, length))
        except EOFError:
            return
        rows, labels, problem = decode_rows(values, (c, h, w))
        if problem is None:
            out.write(_U32.pack(0) + rows.tobytes() + labels.tobytes())
        else:
            msg = problem[1].encode("utf-8")
            out.write(_U32.pack(1) + _U32.pack(problem[0]) + _U32.pack(len(msg)) + msg)
        out.flush()


def _start_helpers() -> list:
    import subprocess

    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    helpers = [
        subprocess.Popen(
            [sys.executable, "-m", "singa_builtins.layers._encoded"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )
        for _ in range(decoder_workers())
    ]
    atexit.register(_stop_helpers)
    return helpers


def _stop_helpers() -> None:
    global _HELPERS
    helpers, _HELPERS = _HELPERS, None
    for proc in helpers or ():
        try:
            proc.stdin.close()
        except OSError:
            pass
    for proc in helpers or ():
        try:
            proc.wait(timeout=5)
        except Exception:
            proc.kill()
            proc.wait()


def decode_rows_in_pool(values: list[bytes], shape):
    """:func:`decode_rows` split over the helper processes (the same result)."""
    global _HELPERS
    shape = tuple(int(s) for s in shape)
    size = int(np.prod(shape))
    with _HELPERS_LOCK:
        if _HELPERS is None or any(p.poll() is not None for p in _HELPERS):
            _stop_helpers()
            _HELPERS = _start_helpers()
        helpers = _HELPERS
        step = -(-len(values) // len(helpers))
        parts = [(i, values[i : i + step]) for i in range(0, len(values), step)]
        try:
            for proc, (_, part) in zip(helpers, parts, strict=False):
                chunks = [_HEAD.pack(*shape, len(part))]
                for v in part:
                    chunks += [_U32.pack(len(v)), v]
                proc.stdin.write(b"".join(chunks))
                proc.stdin.flush()
            answers = []
            for proc, (i, part) in zip(helpers, parts, strict=False):
                (status,) = _U32.unpack(_read_exact(proc.stdout, 4))
                if status == 0:
                    rows = np.frombuffer(_read_exact(proc.stdout, 4 * size * len(part)), np.float32)
                    labels = np.frombuffer(_read_exact(proc.stdout, 4 * len(part)), np.int32)
                    answers.append((rows.reshape(len(part), size), labels, None))
                else:
                    k, length = (
                        _U32.unpack(_read_exact(proc.stdout, 4)),
                        _U32.unpack(_read_exact(proc.stdout, 4)),
                    )
                    msg = _read_exact(proc.stdout, length[0]).decode("utf-8")
                    answers.append((None, None, (i + k[0], msg)))
        except (EOFError, OSError, BrokenPipeError):
            _stop_helpers()
            raise SingaError(
                "an image decoding process ended unexpectedly",
                help="see the messages above; store_conf { prefetching: false } decodes in "
                "the training process instead",
            ) from None
    for _, _, problem in answers:
        if problem is not None:
            return None, None, problem
    return (
        np.concatenate([a[0] for a in answers]),
        np.concatenate([a[1] for a in answers]),
        None,
    )


if __name__ == "__main__":
    serve()
