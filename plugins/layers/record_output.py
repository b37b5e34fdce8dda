"""kRecordOutput: write each instance of the source's data as a RecordProto (SINGA 0.3
§2.5, output_layer/record.cc).

``srclayers = [any layer]``. Each forward writes one serialized ``RecordProto`` per instance
of the batch: ``data`` = the instance's ``size/batch`` float32 values, ``label`` = its label
when the source provides labels (``src.labels()`` is not None), no ``shape`` (as 0.3) —
under the key ``str(instance number)``, to a store of backend ``store_conf.backend``
(default ``kvfile``) at ``store_conf.path``, created at the first forward and flushed after
every batch. Such a file is read back by kRecordInput. Store, keys and publishing as in
:class:`singa_builtins.layers._records.StoreOutputLayer`. No gradient.

Differences from 0.3: ``backend`` defaults to ``kvfile`` (0.3 had no default and failed to
open a store with an empty backend name); a missing path, unknown backend or missing output
folder is reported at set-up; the file is published when the layer is closed (see
StoreOutputLayer), not written in place.
"""

from __future__ import annotations

import numpy as np
from singa_builtins.layers._records import StoreOutputLayer

from singa_core.schema import common_pb2


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


class RecordOutputLayer(StoreOutputLayer):
    type_names = ("kRecordOutput",)
    placement = "host"  # reads records/files on the CPU; the net copies its output
    default_backend = "kvfile"

    def setup(self, srcs):
        super().setup(srcs)
        # A RecordProto with only label (field 2) and packed data (field 4) serializes as
        # [label tag + varint]? + [data tag, byte length, little-endian float32s].
        self._data_head = b"\x22" + _varint(4 * self.dim)
        self._label_heads: dict[int, bytes] = {}

    def _label_head(self, label: int) -> bytes:
        head = self._label_heads.get(label)
        if head is None:
            head = common_pb2.RecordProto(label=label).SerializeToString()
            self._label_heads[label] = head
        return head

    def forward(self, phase, srcs):
        src = srcs[0]
        rows = np.ascontiguousarray(src.data.reshape(self.batchsize, self.dim), dtype="<f4")
        raw = rows.tobytes()
        step = 4 * self.dim
        head = self._data_head
        labels = self.batch_labels(src)
        if labels is None:
            values = [head + raw[k * step : (k + 1) * step] for k in range(self.batchsize)]
        else:
            values = [
                self._label_head(int(lab)) + head + raw[k * step : (k + 1) * step]
                for k, lab in enumerate(labels.tolist())
            ]
        self.write_values(values)
