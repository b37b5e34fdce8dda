"""kRecordInput: reads ``singa.RecordProto`` records from a store (SINGA 0.3 §2.2,
input_layer/record.cc); batching, cycling, random skip and mean/std as in
:mod:`singa_builtins.layers._store_input`.

Each value is a serialized RecordProto: its ``data`` floats if any, else its ``pixel`` bytes
(each an unsigned byte turned into a float); either way exactly ``prod(store_conf.shape)``
values. The record's own ``shape`` is ignored. ``label`` goes to ``aux`` unless the phase
has ``kDeploy``. A mean/std file's first record holds the vector in ``data``.

With ``store_conf.encoded: true`` (StoreProto field 10, unused in 0.3) a record's ``pixel``
holds an image file (JPEG, PNG, ... as ``singa data images --encoded`` writes), decoded
when the batch is read into ``store_conf.shape`` ``[C, H, W]`` (C = 1: grey-scale, 3: RGB
planes); an image of another size is an error naming the record. Decoding needs Pillow
(``singa-classic[images]``). Encoded stores prefetch by default (see ``_store_input``).

Differences from 0.3: a record with neither ``data`` nor ``pixel`` is an error (0.3 logs
"Not pixel nor pixel" and leaves that row of the batch unchanged), and so is a value that
is not a RecordProto, and a record without ``label`` while the layer reads labels (0.3
trained it as class 0); ``store_conf.has_label: false`` reads a store without labels.
"""

from __future__ import annotations

import numpy as np
from google.protobuf.message import DecodeError
from singa_builtins.layers._record_layout import layout_of
from singa_builtins.layers._records import key_text
from singa_builtins.layers._store_input import StoreInputLayer

from singa_core.errors import SingaError
from singa_core.schema import common_pb2
from singa_core.store import RecordBlock


class RecordInputLayer(StoreInputLayer):
    type_names = ("kRecordInput",)
    placement = "host"  # reads records/files on the CPU; the net copies its output

    def prepare_parsing(self) -> None:
        # store_conf.has_label: false: a store without labels (the layer provides none)
        self.has_label = bool(self.conf.store_conf.has_label)
        if self.encoded:
            shape = self.instance_shape
            if len(shape) != 3 or shape[0] not in (1, 3):
                raise self.error(
                    f"layer '{self.name}': store_conf.encoded needs a store_conf.shape of "
                    f"[channels, height, width] with 1 or 3 channels, got {list(shape)}",
                    field="store_conf.shape",
                    help="e.g. `shape: 3 shape: 32 shape: 32` for colour images",
                )
            from singa_builtins._imaging import pil

            try:
                pil()  # Pillow missing: said now, not at the first batch
            except SingaError as err:
                raise err.located(self.ctx.locate("store_conf.encoded")) from None

    def parse_batch(self, records, with_label, rows=None, aux=None):
        rows = self._rows if rows is None else rows
        aux = self.aux if aux is None else aux
        if self.encoded:
            self._parse_encoded(records, with_label, rows, aux)
            return
        if isinstance(records, RecordBlock) and self._decode_block(records, with_label, rows, aux):
            return
        rec = common_pb2.RecordProto()
        parse = rec.ParseFromString
        n = self.rowlen
        want = f"expected {n} (store_conf.shape {list(self.instance_shape)})"
        pixels = []
        labels = [0] * len(records)
        for k, (key, value) in enumerate(records):
            try:
                parse(value)
            except DecodeError:
                raise self.bad_record(key, "is not a RecordProto") from None
            if len(rec.data):
                if len(rec.data) != n:
                    raise self.count_mismatch(
                        key,
                        len(rec.data),
                        "data values",
                        f"has {len(rec.data)} data values, {want}",
                    )
                rows[k] = rec.data
            else:
                pixel = rec.pixel
                if len(pixel) != n:
                    if not pixel:
                        raise self.bad_record(key, "has neither data nor pixel values")
                    raise self.count_mismatch(
                        key, len(pixel), "pixel values", f"has {len(pixel)} pixel values, {want}"
                    )
                pixels.append((k, pixel))
            if with_label and not rec.HasField("label"):
                raise self.no_label(key)
            labels[k] = rec.label
        if pixels and len(pixels) == len(records):  # all raw pixel records: decode in one go
            rows[...] = np.frombuffer(b"".join([p for _, p in pixels]), dtype=np.uint8).reshape(
                rows.shape
            )
        else:
            for k, pixel in pixels:
                rows[k] = np.frombuffer(pixel, dtype=np.uint8)
        if with_label:
            aux[...] = labels

    def _decode_block(self, block: RecordBlock, with_label: bool, rows, aux) -> bool:
        """Same-layout pixel records (``singa data``'s) decoded at once
        (:mod:`~singa_builtins.layers._record_layout`); False: parse them one by one."""
        labels = aux if with_label else None
        layout = getattr(self, "_layout", None)
        if layout is None or not layout.decode(block.values, rows, labels):
            layout = layout_of(block.values[0].tobytes(), self.rowlen)
            if layout is None or not layout.decode(block.values, rows, labels):
                return False
            self._layout = layout  # kept for the next blocks (one reference: thread-safe)
        return True

    def no_label(self, key) -> SingaError:
        return self.error(
            f"layer '{self.name}': record '{key_text(key)}' of '{self.conf.store_conf.path}' "
            "has no label field, and the layer reads labels (store_conf.has_label is true)",
            field="store_conf",
            help="write a label into every record (singa data ... does), or set "
            "`store_conf { has_label: false }` if the job uses no labels",
        )

    def _parse_encoded(self, records, with_label, rows, aux) -> None:
        """Decode image files: in the prefetch thread through the decoding processes (so
        Pillow does not hold this process's GIL against training), else right here."""
        from singa_builtins.layers._encoded import NO_LABEL, decode_rows, decode_rows_in_pool

        values = [value for _, value in records]
        in_producer = self.prefetching and rows is not self._rows
        decode = decode_rows_in_pool if in_producer else decode_rows
        got, labels, problem = decode(values, self.instance_shape)
        if problem is not None:
            k, message = problem
            raise self.bad_record(records[k][0], message)
        rows[...] = got
        if with_label:
            missing = np.flatnonzero(labels == NO_LABEL)
            if missing.size:
                raise self.no_label(records[int(missing[0])][0])
            aux[...] = labels

    def load_vector(self, value):
        rec = common_pb2.RecordProto()
        try:
            rec.ParseFromString(value)
        except DecodeError:
            raise ValueError("its first record is not a RecordProto") from None
        return np.asarray(rec.data, dtype=np.float32)
