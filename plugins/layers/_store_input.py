"""Shared logic of the store-backed input layers (SINGA 0.3 §2.2: StoreInputLayer and
SingleLabelRecordLayer), used by kRecordInput and kCSVInput.

* batch size: ``store_conf.batchsize[0]`` divided by the number of partitions when the layer
  is partitioned on the batch (``partition_dim == 0``) and one value is given;
  ``batchsize[partition_id]`` when several are given (manual split); ``batchsize[0]``
  otherwise;
* ``data`` is ``[batch] + store_conf.shape`` (float32), labels go to ``aux`` (int32);
* partition j of a layer partitioned on the batch reads its stripe of the group's batch:
  it skips the records of partitions 0 … j−1, reads its own, skips those of the others
  (0.3's replicas each read the store from its start, so without ``random_skip`` they saw
  the same records);
* each forward reads ``batch`` (key, value) tuples, rewinding to the first tuple at the end
  of the store (cycling forever, no shuffling). The first forward first skips
  ``U{0..random_skip}`` tuples, drawn from ``ctx.rng``;
* then every instance is standardised: ``x ← x − mean`` (``mean_file``: the vector stored
  in the first tuple of a store of the same backend, else the constant ``mean_value``),
  then ``x ← x / std`` (``std_file`` else ``std_value``).

Differences from 0.3 (which opens the store and the mean/std files lazily in the first
forward and CHECK-fails on bad data): the store and the mean/std files are opened in
``setup``, so a missing file is reported before training starts; every data problem is a
SingaError naming the layer and the record's key. ``prefetching: true`` (the default for
``encoded: true`` stores) reads, decodes and standardises the next batches in a background
thread, together with the crop/mirror of a kImagePreprocess layer reading this one (0.3's
thread only read raw tuples); the records, their order and every random draw are those of
the run without it (``_prefetch``), and ``prefetching: false`` turns it off.
``state_dict`` holds the store position and whether the random skip already happened (as
the training has seen them, not as the prefetch thread has read), so a resumed job
continues with the very next record.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from singa_builtins.layers._prefetch import PrefetchingInput
from singa_builtins.layers._records import (
    key_text,
    open_store,
    seek_store_cursor,
    skip_records,
    store_cursor,
)

from singa_core.errors import SingaError
from singa_core.layer import InputLayer, kDeploy
from singa_core.memory import charge as charge_memory
from singa_core.param import DTYPE
from singa_core.store import KREAD, RecordBlock


class StoreInputLayer(PrefetchingInput, InputLayer):
    """Base of kRecordInput/kCSVInput: subclasses implement :meth:`parse` and
    :meth:`load_vector`."""

    #: whether labels are read (the CSV layer turns this off with has_label: false)
    has_label = True
    deploy_role = "input"

    # -- set-up ----------------------------------------------------------------------
    def setup(self, srcs):
        self.expect_srcs(srcs)
        if not self.conf.HasField("store_conf"):
            raise self.error(
                f"layer '{self.name}' ({self.type_names[0]}) needs a store_conf",
                help='add `store_conf { backend: "kvfile" path: "..." batchsize: 64 shape: ... }`',
            )
        sc = self.conf.store_conf
        deploying = bool(self.ctx.phase & kDeploy)  # fed raw samples: no store, no labels
        self.batchsize = int(self.ctx.batchsize) if deploying else self._batchsize(sc)
        shape = [int(s) for s in sc.shape]
        if any(s <= 0 for s in shape):
            raise self.error(
                f"layer '{self.name}': store_conf.shape must be positive, got {shape}",
                field=f"store_conf.shape[{next(i for i, s in enumerate(shape) if s <= 0)}]",
                help="shape is one record's dimensions, e.g. `shape: 784` or "
                "`shape: 3 shape: 32 shape: 32`",
            )
        self.instance_shape = tuple(shape)
        self.rowlen = int(math.prod(shape))
        self.alloc([self.batchsize, *shape], grad=False)
        self.aux = np.zeros(self.batchsize, dtype=np.int32)
        self._rows = self.data.reshape(self.batchsize, self.rowlen)
        self.backend = sc.backend
        if not self.backend:
            raise self.error(
                f"layer '{self.name}': store_conf.backend is not set",
                field="store_conf",
                help='set `backend: "kvfile"` (RecordProto records) or `backend: "textfile"` (CSV)',
            )
        if not sc.path:
            raise self.error(
                f"layer '{self.name}': store_conf.path is not set",
                field="store_conf",
                help='add `path: "..."` to store_conf: the store file (or folder) to read',
            )
        self.random_skip = int(sc.random_skip)
        if self.random_skip < 0:
            raise self.error(
                f"layer '{self.name}': store_conf.random_skip must be >= 0, got {self.random_skip}",
                field="store_conf.random_skip",
                help="random_skip is how many records at most to skip at the start; 0 skips none",
            )
        self._skipped = False
        self.mean = self._standardiser(sc, "mean")
        self.std = self._standardiser(sc, "std")
        if self.std is not None and not np.all(self.std):
            raise self.error(
                f"layer '{self.name}': the standard deviation to divide by has zeros",
                field="store_conf",
                help="give standard deviations (std_file or std_value) that are all non-zero",
            )
        if deploying:
            self.store = None
            self.encoded = False
            return
        self.store = self._open(sc.path)
        self.encoded = bool(sc.encoded)
        # prefetching: as configured; by default where decoding is the cost (encoded images)
        self._init_prefetch(sc.prefetching if sc.HasField("prefetching") else self.encoded)
        self._charge_reading()
        self.prepare_parsing()
        if self.ctx.phase:  # inside a net: its phase says how records will be read
            self._check_first_record(self.has_label and not (self.ctx.phase & kDeploy))

    def _charge_reading(self) -> None:
        """Charge the memory reading takes beyond the layer's buffers: the pages of the
        store's file its reader keeps mapped (a store that says so: ``resident_bytes()``),
        and the batches the prefetch thread holds (its queue and the one it makes)."""
        resident = getattr(self.store, "resident_bytes", None)
        if resident is not None:
            what = "store pages read (memory-mapped)"
            charge_memory(self, "scratch", (int(resident()),), itemsize=1, what=what)
        if self.prefetching:  # the records and their labels of each batch in flight
            batches = (self.prefetch_depth + 1, self.batchsize, self.rowlen + 1)
            charge_memory(self, "scratch", batches, what="prefetched batches")

    def prepare_parsing(self) -> None:
        """Subclass hook: set up parsing state once the batch size and shape are known."""

    def _check_first_record(self, with_label: bool) -> None:
        """Parse the first record now, so a store that does not match store_conf (wrong
        shape, wrong backend for the layer type, empty) is reported before training."""
        try:
            first = self._next()
            self.parse_batch([first] * self.batchsize, with_label)
        except SingaError as err:
            raise err.located(self.ctx.locate("store_conf")) from None
        finally:
            self.store.seek_to_first()

    def _batchsize(self, sc) -> int:
        self._skip_before = self._skip_after = 0  # records of the other partitions
        values = [int(b) for b in sc.batchsize]
        if not values:
            raise self.error(
                f"layer '{self.name}': store_conf.batchsize is not set",
                field="store_conf",
                help="add `batchsize: 64` to store_conf",
            )
        n, pid = max(int(self.ctx.num_partitions), 1), int(self.ctx.partition_id)
        if self.conf.partition_dim == 0:
            if len(values) == 1:
                bs = values[0] // n
                # partition j reads its stripe of the group's batch of n·bs records
                self._skip_before, self._skip_after = pid * bs, (n - 1 - pid) * bs
            elif pid < len(values):
                bs = values[pid]
                self._skip_before = sum(values[:pid])
                self._skip_after = sum(values[pid + 1 : n])
            else:
                raise self.error(
                    f"layer '{self.name}': store_conf.batchsize has {len(values)} values "
                    f"but this is partition {self.ctx.partition_id}",
                    field="store_conf",
                    help="give one batchsize per partition, or a single one to split evenly",
                )
        else:
            bs = values[0]
        if bs <= 0:
            index = pid if len(values) > 1 and self.conf.partition_dim == 0 else 0
            if values[index] <= 0:
                what = f"store_conf.batchsize is {values[index]}"
                how = "set batchsize to the number of records per step, e.g. `batchsize: 64`"
            else:  # positive, but less than one record per partition
                what = f"store_conf.batchsize {values[index]} split across {n} partitions is {bs}"
                how = f"use a batchsize of at least {n} (one record per partition)"
            raise self.error(
                f"layer '{self.name}': the batch size must be positive; {what}",
                field=f"store_conf.batchsize[{index}]",
                help=how,
            )
        return bs

    def _open(self, path: str):
        return open_store(self, self.backend, path, KREAD, "store_conf")

    def _standardiser(self, sc, what: str) -> np.ndarray | None:
        file_field, value_field = f"{what}_file", f"{what}_value"
        if sc.HasField(file_field) and getattr(sc, file_field):
            path = getattr(sc, file_field)
            store = self._open(path)
            try:
                first = store.read()
            finally:
                store.close()
            if first is None:
                raise self.error(
                    f"layer '{self.name}': {file_field} '{path}' is empty",
                    field="store_conf",
                    help="give a file that holds one value per element of an instance "
                    "(store_conf.shape)",
                )
            try:
                vec = np.asarray(self.load_vector(first[1]), dtype=DTYPE).reshape(-1)
            except (ValueError, UnicodeDecodeError) as exc:
                raise self.error(
                    f"layer '{self.name}': cannot read {file_field} '{path}': {exc}",
                    field="store_conf",
                    help="check the path and that the file holds a vector of numbers",
                ) from None
            if vec.size != self.rowlen:
                raise self.error(
                    f"layer '{self.name}': {file_field} '{path}' holds {vec.size} values, "
                    f"expected {self.rowlen} (store_conf.shape {list(self.instance_shape)})",
                    field="store_conf",
                    help="give the file of this instance size, or fix store_conf.shape",
                )
            return vec
        if sc.HasField(value_field):
            value = float(getattr(sc, value_field))
            if what == "std" and value == 0.0:
                raise self.error(
                    f"layer '{self.name}': store_conf.std_value must not be 0",
                    field="store_conf.std_value",
                    help="values are divided by std_value; leave it out to keep them as read",
                )
            return np.full(self.rowlen, value, dtype=DTYPE)
        return None

    # -- the deploy net: raw samples in, the same standardisation as records ----------
    def sample_shape(self) -> tuple[int, ...]:
        return self.instance_shape

    def feed(self, values: np.ndarray) -> None:
        np.copyto(self._rows, values.reshape(self.batchsize, self.rowlen))
        if self.mean is not None:
            self._rows -= self.mean
        if self.std is not None:
            self._rows /= self.std

    def to_onnx(self, g, inputs):
        x = g.reshape(inputs[0], (self.rowlen,), f"{self.name}/rows")
        if self.mean is not None:
            x = g.add(
                "Sub", [x, g.const(self.mean, f"{self.name}/mean")], name=f"{self.name}/-mean"
            )
        if self.std is not None:
            x = g.add("Div", [x, g.const(self.std, f"{self.name}/std")], name=f"{self.name}/std")
        return g.reshape(x, self.instance_shape, self.name)

    # -- subclass hooks ----------------------------------------------------------------
    def parse_batch(
        self,
        records: list[tuple[bytes, bytes]] | RecordBlock,
        with_label: bool,
        rows=None,
        aux=None,
    ) -> None:
        """Decode the batch's ``(key, value)`` tuples (a list, or a store's
        :class:`~singa_core.store.RecordBlock` of fixed-size ones) into ``rows`` (default
        ``self._rows``; one row per instance, ``rowlen`` values) and, ``with_label``, their
        labels into ``aux`` (default ``self.aux``). May run in the prefetch thread: no
        other state."""
        raise NotImplementedError

    def load_vector(self, value: bytes):
        """The mean/std vector stored in ``value`` (first tuple of a mean/std file)."""
        raise NotImplementedError

    def count_mismatch(self, key: bytes, count: int, what: str, said: str) -> SingaError:
        """Record ``key`` holds ``count`` values (``what``) where one record has ``rowlen``;
        ``said`` is how the record is described (``has 4 fields, expected ...``). When
        store_conf.shape was left out the error names it and the line to add."""
        sc = self.conf.store_conf
        record = f"layer '{self.name}': record '{key_text(key)}' of '{sc.path}'"
        if not sc.shape:
            return self.error(
                f"{record} has {count} {what}, but store_conf.shape is not set (so a record "
                "holds 1 value)",
                field="store_conf",
                help=f"add `shape: {count}` to store_conf (one record's dimensions, e.g. "
                "`shape: 1 shape: 28 shape: 28` for 28x28 grey images)",
            )
        return self.error(
            f"{record} {said}",
            field="store_conf",
            help=f"store_conf.shape must describe the store's records: {count} {what} a "
            f"record, e.g. `shape: {count}`",
        )

    def bad_record(self, key: bytes, message: str) -> SingaError:
        return self.error(
            f"layer '{self.name}': record '{key_text(key)}' of '{self.conf.store_conf.path}' "
            f"{message}",
            field="store_conf",
            help="the store is damaged or not what store_conf describes: re-create it with "
            "`singa data` (or the converter that wrote it), or fix store_conf",
        )

    # -- running -----------------------------------------------------------------------
    def _next(self):
        rec = self.store.read()
        if rec is None:
            self.store.seek_to_first()
            rec = self.store.read()
            if rec is None:
                raise self.error(
                    f"layer '{self.name}': store '{self.conf.store_conf.path}' has no records",
                    field="store_conf",
                    help="point store_conf.path at a store that holds records (`singa data` "
                    "writes them)",
                )
        return rec

    def forward(self, phase, srcs):
        self._forward_batch(phase)

    # -- producing batches (in forward, or ahead in the prefetch thread) ----------------
    def _read_records(self, rng) -> list | RecordBlock:
        if not self._skipped:
            self._skipped = True
            if self.random_skip > 0:  # time bounded by the store's size, not the draw
                skip_records(self, int(rng.integers(0, self.random_skip + 1)))
        if not (self._skip_before or self._skip_after):
            read_block = getattr(self.store, "read_block", None)  # optional (Store)
            block = read_block(self.batchsize) if read_block is not None else None
            if block is not None:  # fixed-size records: read at once
                return block
        read = self.store.read
        records = [None] * self.batchsize
        for _ in range(self._skip_before):
            self._next()
        for k in range(self.batchsize):
            rec = read()
            records[k] = rec if rec is not None else self._next()
        for _ in range(self._skip_after):
            self._next()
        return records

    def _produce(self, phase, rngs):
        """The next batch: (rows, labels, [each stage's output])."""
        if self.prefetching:
            rows = np.empty_like(self._rows)
            aux = np.empty_like(self.aux)
        else:
            rows, aux = self._rows, self.aux
        try:
            records = self._read_records(rngs[0])
            self.parse_batch(records, self.has_label and not (phase & kDeploy), rows, aux)
        except SingaError as err:
            raise err.located(self.ctx.locate("store_conf")) from None
        if self.mean is not None:
            rows -= self.mean
        if self.std is not None:
            rows /= self.std
        data = rows.reshape(self.data.shape)
        staged = [
            stage.stage_apply(phase, data, rngs[k + 1]) for k, stage in enumerate(self._stages)
        ]
        return rows, aux, staged

    def _consume(self, batch) -> None:
        rows, aux, staged = batch
        if rows is not self._rows:
            self._rows[...] = rows
            self.aux[...] = aux
        for stage, out in zip(self._stages, staged, strict=True):
            stage.stage_take(out)

    def _cursor(self) -> dict[str, Any]:
        return store_cursor(self)

    def _seek_cursor(self, state: dict[str, Any]) -> None:
        seek_store_cursor(self, state)

    def close(self) -> None:
        """Stop the prefetch thread (it starts again at the next forward)."""
        self._stop_prefetch()

    def labels(self):
        return self.aux if self.has_label else None

    # -- resume ------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return self._visible_cursor()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._load_cursor(state)
