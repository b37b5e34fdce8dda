"""Decoding a block of same-layout RecordProto values at once (kRecordInput's fast path).

Stores written by ``singa data`` hold records of one layout: the same ``shape`` fields, a
one-byte ``label`` and ``pixel`` bytes of one length, so each serialized value differs
from the next only in its pixel payload and its label byte. :func:`layout_of` learns that
layout from one value (parsed by protobuf); :meth:`RecordLayout.decode` then checks that
every value of a block has the very bytes of the learnt one everywhere else and takes the
pixels and labels out of all of them with array operations.

Why the result is protobuf's: the wire format is read left to right from tags, lengths and
varint continuation bits. Where all those bytes equal the learnt value's, every value is
read as that value is; a payload byte is never read as structure, and a label byte below
0x80 is a whole one-byte varint. A block with any other difference (another length, a
label of 128 or more, a field more or less) is declined, and the caller parses it value by
value, with that path's errors for a bad record.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from singa_core.schema import common_pb2

_PIXEL_TAG = b"\x1a"  # field 3, length-delimited
_LABEL_TAG = b"\x10"  # field 2, varint


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


@dataclass(frozen=True)
class RecordLayout:
    length: int  # bytes of one serialized value
    fixed: np.ndarray  # bool (length,): the bytes every value shares
    template: np.ndarray  # uint8 (length,): the learnt value
    pixel_start: int
    pixel_count: int
    label_at: int | None  # the label's byte, or None (no label field)

    def decode(self, values: np.ndarray, rows: np.ndarray, labels: np.ndarray | None) -> bool:
        """Pixels of ``values`` (uint8 ``(n, length)``) into ``rows`` (``(n, pixel_count)``),
        labels into ``labels`` (None: not read); False, writing nothing, when a value does
        not have this layout."""
        if values.shape[1] != self.length:
            return False
        if not (values[:, self.fixed] == self.template[self.fixed]).all():
            return False
        if self.label_at is not None and (values[:, self.label_at] >= 0x80).any():
            return False
        if labels is not None:
            if self.label_at is None:
                return False
            labels[...] = values[:, self.label_at]
        rows[...] = values[:, self.pixel_start : self.pixel_start + self.pixel_count]
        return True


def layout_of(value: bytes, pixel_count: int) -> RecordLayout | None:
    """The layout of ``value`` when it is a RecordProto of ``pixel_count`` pixel bytes, no
    ``data`` and a one-byte label (or none); else None."""
    rec = common_pb2.RecordProto()
    try:
        rec.ParseFromString(value)
    except Exception:  # noqa: BLE001 - not a RecordProto: the value-by-value path says so
        return None
    if len(rec.data) or len(rec.pixel) != pixel_count:
        return None
    payload = _PIXEL_TAG + _varint(pixel_count) + rec.pixel
    at = value.find(payload)
    if at < 0 or value.find(payload, at + 1) >= 0:
        return None  # not found once (a repeated pixel field): value by value
    start = at + len(payload) - pixel_count
    fixed = np.ones(len(value), dtype=bool)
    fixed[start : start + pixel_count] = False
    label_at = None
    if rec.HasField("label"):
        label = rec.label
        if not 0 <= label < 0x80:
            return None
        label_at = _label_byte(value, label, at, start + pixel_count, rec.pixel)
        if label_at is None:
            return None
        fixed[label_at] = False
    return RecordLayout(
        length=len(value),
        fixed=fixed,
        template=np.frombuffer(value, dtype=np.uint8).copy(),
        pixel_start=start,
        pixel_count=pixel_count,
        label_at=label_at,
    )


def _label_byte(value: bytes, label: int, pixel_from: int, pixel_to: int, pixel: bytes):
    """The offset of the byte that holds ``label``: a ``label`` tag and that byte outside
    the pixel field, proven by parsing the value with the byte changed."""
    probe = common_pb2.RecordProto()
    other = (label + 1) % 0x80
    pair = _LABEL_TAG + bytes([label])
    at = value.find(pair)
    while at >= 0:
        if at + 2 <= pixel_from or at >= pixel_to:
            changed = value[: at + 1] + bytes([other]) + value[at + 2 :]
            probe.ParseFromString(changed)
            if probe.label == other and probe.pixel == pixel:
                return at + 1
        at = value.find(pair, at + 1)
    return None
