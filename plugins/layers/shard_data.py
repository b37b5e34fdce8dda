"""kShardData: the deprecated 0.1-style data layer (SINGA 0.3 §2.2, input_layer/deprecated.cc).

Reads records from a kvfile store (0.1's DataShard: ``sharddata_conf.path`` may be a folder
holding ``shard.dat``). It has no data blob: parser layers (kMnist, kRGBImage, kLabel)
that name it as their source read its current batch through :meth:`records` (a list of
``RecordProto``; :meth:`keys` gives their keys) and its first record through
:meth:`sample`, which gives them their shapes at set-up.

* batch size: ``sharddata_conf.batchsize``, divided by the number of partitions when the
  layer is partitioned on the batch (``partition_dim == 0``);
* each forward reads ``batchsize`` tuples, rewinding at the end of the store (cycling
  forever, no shuffling); the first forward first skips ``U{0..random_skip}`` tuples drawn
  from ``ctx.rng``;
* a value is a serialized 0.1 ``Record`` whose ``image`` is the RecordProto; a bare
  RecordProto (what 0.3's converters and ``singa data`` write) is accepted too.

Differences from 0.3: a value that is neither a Record with an image nor a RecordProto, or
a damaged store, is a SingaError naming the file and key (0.3 did not check); bare
RecordProto values are accepted (an extension, so ``singa data`` output can be read);
``state_dict`` holds the store position and whether the random skip happened, so a resumed
job continues with the very next record.
"""

from __future__ import annotations

from typing import Any

from google.protobuf.message import DecodeError
from singa_builtins.layers._records import (
    key_text,
    open_store,
    parse_image_record,
    partition_batchsize,
    seek_store_cursor,
    skip_records,
    store_cursor,
)

from singa_core.errors import SingaError
from singa_core.layer import InputLayer
from singa_core.memory import charge as charge_memory
from singa_core.schema import common_pb2
from singa_core.store import KREAD

_FIELD = "sharddata_conf"


class ShardDataLayer(InputLayer):
    type_names = ("kShardData",)
    placement = "host"  # reads records/files on the CPU; the net copies its output
    deploy_role = "drop"  # the parser layers it feeds are fed raw samples instead
    #: the DataProto field configuring the layer, and the store backend it reads
    conf_field = _FIELD
    backend = "kvfile"

    def setup(self, srcs):
        self.expect_srcs(srcs)
        field = self.conf_field
        conf = getattr(self.conf, field)
        if not self.conf.HasField(field) or not conf.path:
            raise self.error(
                f"layer '{self.name}' ({self.type_names[0]}) needs {field}.path",
                field=field,
                help=f'add `{field} {{ path: "train_shard" batchsize: 64 }}`',
            )
        if not conf.HasField("batchsize"):
            raise self.error(
                f"layer '{self.name}': {field}.batchsize is not set",
                field=field,
                help=f"add `batchsize: 64` to {field}",
            )
        self.path = conf.path
        self.batchsize = partition_batchsize(self, conf.batchsize, field)
        self.random_skip = int(conf.random_skip)
        if self.random_skip < 0:
            raise self.error(
                f"layer '{self.name}': {field}.random_skip must be >= 0, got {self.random_skip}",
                field=f"{field}.random_skip",
                help="random_skip is how many records at most to skip at the start; 0 skips none",
            )
        self._skipped = False
        self.store = open_store(self, self.backend, self.path, KREAD, field)
        resident = getattr(self.store, "resident_bytes", None)
        if resident is not None:  # the pages of the file its reader keeps mapped
            what = "store pages read (memory-mapped)"
            charge_memory(self, "scratch", (int(resident()),), itemsize=1, what=what)
        n = self.batchsize
        self._wrappers = [common_pb2.Record() for _ in range(n)]
        self._plain = [common_pb2.RecordProto() for _ in range(n)]
        self._records: list[common_pb2.RecordProto] = []
        self._keys: list[bytes] = []
        try:
            key, value = self._next()
            self._sample = common_pb2.RecordProto()
            self._sample.CopyFrom(self._parse(0, key, value))
        finally:
            self.store.seek_to_first()

    # -- what parser layers read ----------------------------------------------------------
    def records(self) -> list[common_pb2.RecordProto]:
        """The current batch (valid until the next forward)."""
        return self._records

    def keys(self) -> list[bytes]:
        """The keys of the current batch's records."""
        return self._keys

    def sample(self) -> common_pb2.RecordProto:
        """The store's first record (read at set-up)."""
        return self._sample

    # -- reading --------------------------------------------------------------------------
    def _parse(self, k: int, key: bytes, value: bytes) -> common_pb2.RecordProto:
        try:
            return parse_image_record(value, self._wrappers[k], self._plain[k])
        except DecodeError:
            raise self.error(
                f"layer '{self.name}': record '{key_text(key)}' of '{self.path}' is neither "
                "a Record nor a RecordProto",
                field=self.conf_field,
                help="kShardData reads stores of serialized Record (0.1) or RecordProto values",
            ) from None

    def _next(self) -> tuple[bytes, bytes]:
        try:
            rec = self.store.read()
            if rec is None:
                self.store.seek_to_first()
                rec = self.store.read()
        except SingaError as err:  # a damaged store
            raise err.located(self.ctx.locate(self.conf_field)) from None
        if rec is None:
            raise self.error(
                f"layer '{self.name}': store '{self.path}' has no records",
                field=self.conf_field,
                help="point the store's path at a store that holds records (`singa data` "
                "writes them)",
            )
        return rec

    def forward(self, phase, srcs):
        if not self._skipped:
            self._skipped = True
            if self.random_skip > 0:  # time bounded by the store's size, not the draw
                skip_records(self, int(self.ctx.rng.integers(0, self.random_skip + 1)))
        keys, records = [], []
        for k in range(self.batchsize):
            key, value = self._next()
            keys.append(key)
            records.append(self._parse(k, key, value))
        self._keys, self._records = keys, records

    # -- resume ---------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return store_cursor(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        seek_store_cursor(self, state)
