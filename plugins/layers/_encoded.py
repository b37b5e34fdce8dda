"""Decoding encoded records (kRecordInput with ``store_conf.encoded``), in this process or
in helper processes.

:func:`decode_rows` turns serialized RecordProtos whose ``pixel`` holds an image file into
float rows (a record with ``data`` floats keeps them). The prefetch thread of an encoded
kRecordInput sends its batches to :func:`decoder_pool`'s processes instead of decoding in
the thread: Pillow's per-image Python work would otherwise hold the GIL against the
training thread. The result is the same array either way (the same function computes it).
"""

from __future__ import annotations

import atexit
import os
import threading

import numpy as np


def decode_rows(values: list[bytes], shape: tuple[int, int, int]):
    """``(rows float32 [n, C·H·W], labels int32 [n], problem)``; ``problem`` is None or
    ``(k, message)`` for the first record that does not decode into ``shape``."""
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
        labels[k] = rec.label
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


_POOL = None
_POOL_LOCK = threading.Lock()


def decoder_workers() -> int:
    """Helper processes: the usable CPUs but one (the training's), at least 1, at most 4."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count() or 1
    return max(1, min(4, cpus - 1))


def decoder_pool():
    """The process-wide pool of decoding processes (started on first use, "spawn")."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            from concurrent.futures import ProcessPoolExecutor
            from multiprocessing import get_context

            _POOL = ProcessPoolExecutor(
                max_workers=decoder_workers(), mp_context=get_context("spawn")
            )
            atexit.register(_shutdown)
        return _POOL


def _shutdown() -> None:
    global _POOL
    pool, _POOL = _POOL, None
    if pool is not None:
        pool.shutdown(wait=True, cancel_futures=True)


def decode_rows_in_pool(values: list[bytes], shape):
    """:func:`decode_rows` split over the pool's processes (same result)."""
    pool = decoder_pool()
    parts = decoder_workers()
    step = -(-len(values) // parts)
    futures = [
        (i, pool.submit(decode_rows, values[i : i + step], tuple(shape)))
        for i in range(0, len(values), step)
    ]
    rows, labels = [], []
    for i, fut in futures:
        r, lab, problem = fut.result()
        if problem is not None:
            return None, None, (i + problem[0], problem[1])
        rows.append(r)
        labels.append(lab)
    return np.concatenate(rows), np.concatenate(labels), None
