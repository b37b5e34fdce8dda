"""kLMDBData: the deprecated 0.1-style data layer reading a Caffe LMDB database (SINGA 0.3
§2.2, input_layer/deprecated.cc LMDBDataLayer; compiled in 0.3 only with USE_LMDB).

``lmdbdata_conf {path, batchsize, random_skip}`` (a DataProto, as kShardData's). ``path`` is
the LMDB folder Caffe's ``convert_imageset`` / ``convert_mnist_data`` wrote (``data.mdb``).
Each value is a serialized Caffe ``Datum`` (wire format in ``singa_builtins._caffe``; no
caffe needed), turned into the RecordProto the 0.1 parser layers read (kMnist, kRGBImage,
kLabel name this layer as their source), as 0.3's ``ConvertCaffeDatumToRecord`` did:

* ``shape = [channels, height, width]``, ``label``;
* raw Datums: ``pixel`` = the ``data`` bytes (Caffe's planes as stored: BGR for colour), or
  ``data`` = ``float_data``;
* encoded Datums (``encoded: true``, a JPEG/PNG file in ``data``, what ``convert_imageset
  --encoded`` writes): decoded in its own colours (grey-scale stays one channel, colour
  becomes BGR planes like Caffe's decoder), so a Caffe ``mean.binaryproto`` fits either.

Batching, cycling, the first batch's ``random_skip`` and resume are kShardData's (records in
key order, LMDB's order). Encoded Datums are read and decoded a batch ahead in a background
thread (``_prefetch``): the same records in the same order, ``state_dict`` the position the
training has reached.

Differences from 0.3: a value that is not a Datum with an image, a Datum whose data does
not match its dimensions, an image that does not decode and a damaged database are
SingaErrors naming the database and the key (0.3 CHECK-failed or read garbage); encoded
Datums are decoded (0.3 copied the compressed bytes as pixels).
"""

from __future__ import annotations

from typing import Any

from singa_builtins._caffe import parse_datum
from singa_builtins.layers._prefetch import PrefetchingInput
from singa_builtins.layers._records import (
    key_text,
    seek_store_cursor,
    skip_records,
    store_cursor,
)
from singa_builtins.layers.shard_data import ShardDataLayer

from singa_core.errors import SingaError
from singa_core.schema import common_pb2

_FIELD = "lmdbdata_conf"
_HELP = (
    "kLMDBData reads an LMDB of Caffe Datums (convert_imageset, convert_mnist_data); for "
    "SINGA's own stores use kShardData or kRecordInput"
)


class LMDBDataLayer(PrefetchingInput, ShardDataLayer):
    type_names = ("kLMDBData",)
    placement = "host"  # reads records/files on the CPU; the net copies its output
    conf_field = _FIELD
    backend = "lmdb"

    def setup(self, srcs):
        self._init_prefetch(False)
        self._encoded_seen = False
        super().setup(srcs)  # opens the store, reads the first record (the sample)
        # decoding is the cost worth hiding: prefetch when the records are encoded
        self._init_prefetch(self._encoded_seen)
        self._batch_keys: list[bytes] = []

    # -- records ---------------------------------------------------------------------------
    def _parse(self, k: int, key: bytes, value: bytes) -> common_pb2.RecordProto:
        try:
            datum = parse_datum(value)
        except ValueError as exc:
            raise self._bad(key, str(exc)) from None
        rec = common_pb2.RecordProto(label=int(datum.label))
        if datum.encoded:
            from singa_builtins._imaging import decode_native

            self._encoded_seen = True
            try:
                image = decode_native(datum.data, order="BGR")
            except ValueError as exc:
                raise self._bad(key, f"holds an encoded image that {exc}") from None
            except SingaError as err:  # Pillow missing
                raise err.located(self.ctx.locate(_FIELD)) from None
            rec.shape.extend(image.shape)
            rec.pixel = image.tobytes()
        else:
            rec.shape.extend([datum.channels, datum.height, datum.width])
            if datum.data:
                rec.pixel = datum.data
            else:
                rec.data.extend(datum.float_data)
        return rec

    def _bad(self, key: bytes, message: str) -> SingaError:
        return self.error(
            f"layer '{self.name}': record '{key_text(key)}' of LMDB '{self.path}' {message}",
            field=_FIELD,
            help=_HELP,
        )

    # -- batches (in forward, or a batch ahead in the prefetch thread) ---------------------
    def forward(self, phase, srcs):
        self._forward_batch(phase)

    def _produce(self, phase, rngs):
        if not self._skipped:
            self._skipped = True
            if self.random_skip > 0:  # time bounded by the store's size, not the draw
                skip_records(self, int(rngs[0].integers(0, self.random_skip + 1)))
        keys, records = [], []
        for k in range(self.batchsize):
            key, value = self._next()
            keys.append(key)
            records.append(self._parse(k, key, value))
        return keys, records

    def _consume(self, batch) -> None:
        self._keys, self._records = batch

    def _cursor(self) -> dict[str, Any]:
        return store_cursor(self)

    def _seek_cursor(self, state: dict[str, Any]) -> None:
        seek_store_cursor(self, state)

    def state_dict(self) -> dict[str, Any]:
        return self._visible_cursor()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._load_cursor(state)

    def close(self) -> None:
        """Stop the prefetch thread (it starts again at the next forward)."""
        self._stop_prefetch()
