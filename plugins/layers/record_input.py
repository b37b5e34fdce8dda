"""kRecordInput: reads ``singa.RecordProto`` records from a store (SINGA 0.3 §2.2,
input_layer/record.cc); batching, cycling, random skip and mean/std as in
:mod:`singa_builtins.layers._store_input`.

Each value is a serialized RecordProto: its ``data`` floats if any, else its ``pixel`` bytes
(each an unsigned byte turned into a float); either way exactly ``prod(store_conf.shape)``
values. The record's own ``shape`` is ignored. ``label`` goes to ``aux`` unless the phase
has ``kDeploy``. A mean/std file's first record holds the vector in ``data``.

Differences from 0.3: a record with neither ``data`` nor ``pixel`` is an error (0.3 logs
"Not pixel nor pixel" and leaves that row of the batch unchanged), and so is a value that
is not a RecordProto.
"""

from __future__ import annotations

import numpy as np
from google.protobuf.message import DecodeError
from singa_builtins.layers._store_input import StoreInputLayer

from singa_core.schema import common_pb2


class RecordInputLayer(StoreInputLayer):
    type_names = ("kRecordInput",)

    def setup(self, srcs):
        self._rec = common_pb2.RecordProto()
        super().setup(srcs)

    def prepare_parsing(self) -> None:
        self._labels = [0] * self.batchsize
        self._want = f"expected {self.rowlen} (store_conf.shape {list(self.instance_shape)})"

    def parse_batch(self, records, with_label):
        rec = self._rec
        parse = rec.ParseFromString
        n = self.rowlen
        rows = self._rows
        pixels = []
        labels = self._labels
        for k, (key, value) in enumerate(records):
            try:
                parse(value)
            except DecodeError:
                raise self.bad_record(key, "is not a RecordProto") from None
            if len(rec.data):
                if len(rec.data) != n:
                    raise self.bad_record(key, f"has {len(rec.data)} data values, {self._want}")
                rows[k] = rec.data
            else:
                pixel = rec.pixel
                if len(pixel) != n:
                    if not pixel:
                        raise self.bad_record(key, "has neither data nor pixel values")
                    raise self.bad_record(key, f"has {len(pixel)} pixel values, {self._want}")
                pixels.append((k, pixel))
            labels[k] = rec.label
        if len(pixels) == len(records):  # all pixel records: decode them in one go
            rows[...] = np.frombuffer(b"".join([p for _, p in pixels]), dtype=np.uint8).reshape(
                rows.shape
            )
        else:
            for k, pixel in pixels:
                rows[k] = np.frombuffer(pixel, dtype=np.uint8)
        if with_label:
            self.aux[...] = labels

    def load_vector(self, value):
        rec = common_pb2.RecordProto()
        try:
            rec.ParseFromString(value)
        except DecodeError:
            raise ValueError("its first record is not a RecordProto") from None
        return np.asarray(rec.data, dtype=np.float32)
