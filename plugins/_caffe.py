"""Caffe's ``Datum`` and ``BlobProto`` wire formats, described here by hand (no caffe import).

The two messages are built with ``descriptor_pb2`` in a descriptor pool of their own, with
Caffe's field numbers and types (caffe/proto/caffe.proto)::

    message Datum {
      optional int32 channels = 1;  optional int32 height = 2;  optional int32 width = 3;
      optional bytes data = 4;      // C x H x W unsigned bytes (BGR planes for colour)
      optional int32 label = 5;
      repeated float float_data = 6;
      optional bool encoded = 7 [default = false];  // data holds a JPEG/PNG file
    }
    message BlobShape { repeated int64 dim = 1 [packed = true]; }
    message BlobProto {
      optional BlobShape shape = 7;
      repeated float data = 5 [packed = true];  repeated float diff = 6 [packed = true];
      repeated double double_data = 8 [packed = true];
      repeated double double_diff = 9 [packed = true];
      optional int32 num = 1;  optional int32 channels = 2;
      optional int32 height = 3;  optional int32 width = 4;
    }

Used by kLMDBData (Datum records of an LMDB written by ``convert_imageset`` /
``convert_mnist_data``) and by kRGBImage's ``meanfile`` (a ``mean.binaryproto`` written by
``compute_image_mean``). Parsing accepts packed and unpacked repeated fields alike.
"""

from __future__ import annotations

import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

_F = descriptor_pb2.FieldDescriptorProto


def _build():
    fdp = descriptor_pb2.FileDescriptorProto(
        name="singa_builtins/caffe_wire.proto", package="singa_caffe_wire", syntax="proto2"
    )

    def add(msg, name, number, ftype, label=_F.LABEL_OPTIONAL, packed=False, type_name=None):
        f = msg.field.add(name=name, number=number, type=ftype, label=label)
        if packed:
            f.options.packed = True
        if type_name:
            f.type_name = type_name
        return f

    datum = fdp.message_type.add(name="Datum")
    add(datum, "channels", 1, _F.TYPE_INT32)
    add(datum, "height", 2, _F.TYPE_INT32)
    add(datum, "width", 3, _F.TYPE_INT32)
    add(datum, "data", 4, _F.TYPE_BYTES)
    add(datum, "label", 5, _F.TYPE_INT32)
    add(datum, "float_data", 6, _F.TYPE_FLOAT, _F.LABEL_REPEATED)
    enc = add(datum, "encoded", 7, _F.TYPE_BOOL)
    enc.default_value = "false"

    shape = fdp.message_type.add(name="BlobShape")
    add(shape, "dim", 1, _F.TYPE_INT64, _F.LABEL_REPEATED, packed=True)

    blob = fdp.message_type.add(name="BlobProto")
    add(blob, "num", 1, _F.TYPE_INT32)
    add(blob, "channels", 2, _F.TYPE_INT32)
    add(blob, "height", 3, _F.TYPE_INT32)
    add(blob, "width", 4, _F.TYPE_INT32)
    add(blob, "data", 5, _F.TYPE_FLOAT, _F.LABEL_REPEATED, packed=True)
    add(blob, "diff", 6, _F.TYPE_FLOAT, _F.LABEL_REPEATED, packed=True)
    add(blob, "shape", 7, _F.TYPE_MESSAGE, type_name=".singa_caffe_wire.BlobShape")
    add(blob, "double_data", 8, _F.TYPE_DOUBLE, _F.LABEL_REPEATED, packed=True)
    add(blob, "double_diff", 9, _F.TYPE_DOUBLE, _F.LABEL_REPEATED, packed=True)

    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    get = message_factory.GetMessageClass
    return (
        get(pool.FindMessageTypeByName("singa_caffe_wire.Datum")),
        get(pool.FindMessageTypeByName("singa_caffe_wire.BlobShape")),
        get(pool.FindMessageTypeByName("singa_caffe_wire.BlobProto")),
    )


Datum, BlobShape, BlobProto = _build()


def parse_datum(value: bytes, datum=None):
    """``value`` parsed as a Datum (reusing ``datum`` if given); ValueError if it is not one.

    A Datum must say what it holds: encoded bytes, or positive dimensions whose product
    matches its ``data`` bytes or ``float_data`` values.
    """
    msg = datum if datum is not None else Datum()
    try:
        msg.ParseFromString(value)
    except DecodeError:
        raise ValueError("is not a Caffe Datum (protobuf decoding failed)") from None
    if msg.encoded:
        if not msg.data:
            raise ValueError("is an encoded Datum without image bytes")
        return msg
    dims = (msg.channels, msg.height, msg.width)
    if min(dims) <= 0:
        raise ValueError(f"is not a Caffe Datum with an image (channels, height, width {dims})")
    count = dims[0] * dims[1] * dims[2]
    have = len(msg.data) or len(msg.float_data)
    if have != count:
        what = "data bytes" if msg.data else "float_data values"
        raise ValueError(f"has {have} {what}, but {dims[0]}x{dims[1]}x{dims[2]} = {count}")
    return msg


def blob_values(buf: bytes) -> tuple[np.ndarray, list[int]]:
    """The values and shape of a serialized BlobProto (a Caffe ``.binaryproto``).

    The shape is ``shape.dim`` if set, else ``[num, channels, height, width]`` (the legacy
    fields ``compute_image_mean`` writes). Values come from ``data`` or ``double_data``.
    Raises ValueError with the reason.
    """
    blob = BlobProto()
    try:
        blob.ParseFromString(buf)
    except DecodeError:
        raise ValueError("it is not a Caffe BlobProto (protobuf decoding failed)") from None
    if len(blob.data):
        values = np.asarray(blob.data, dtype=np.float32)
    elif len(blob.double_data):
        values = np.asarray(blob.double_data, dtype=np.float64).astype(np.float32)
    else:
        raise ValueError("it holds no mean values (read as a Caffe BlobProto with no data)")
    if blob.HasField("shape"):
        shape = [int(d) for d in blob.shape.dim]
    else:
        shape = [int(blob.num), int(blob.channels), int(blob.height), int(blob.width)]
    known = [d for d in shape if d > 0]
    if known and int(np.prod(known)) != values.size:
        raise ValueError(f"its shape {shape} does not match its {values.size} values")
    return values, shape
