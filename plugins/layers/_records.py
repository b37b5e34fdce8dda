"""Helpers shared by the 0.1-style input layers (kShardData and its parsers kMnist,
kRGBImage, kLabel), the image layers (kImagePreprocess, kRGBImage) and the store-writing
output layers (kCSVOutput, kRecordOutput).
"""

from __future__ import annotations

import os
import struct
import weakref
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

from singa_core.errors import SingaError
from singa_core.layer import Layer, OutputLayer
from singa_core.running.paths import readable_file_problem, writable_file_problem
from singa_core.schema import common_pb2
from singa_core.store import KAPPEND, KCREATE, KREAD


def key_text(key: bytes | str) -> str:
    if isinstance(key, bytes):
        return key.decode("utf-8", errors="replace")
    return str(key)


# -- stores ----------------------------------------------------------------------------------
def store_class(layer: Layer, backend: str, field: str):
    """The store plugin registered as ``backend`` (an error located at ``field`` if none)."""
    get = layer.ctx.get_plugin
    if get is None:
        from singa_core.plugin_host.host import get_host

        get = get_host().get
    try:
        return get("store", backend)
    except SingaError as err:
        raise err.located(layer.ctx.locate(field)) from None


def open_store(layer: Layer, backend: str, path: str, mode: int, field: str):
    """A ``backend`` store opened at ``path``; a failure is located at ``field``."""
    cls = store_class(layer, backend, field)
    if mode == KREAD:
        problem = readable_file_problem(path, folder_ok=True)
        if problem == "does not exist":
            problem = None  # the store says what it looked for
    else:
        problem = writable_file_problem(path)
    if problem:
        raise SingaError(
            f"cannot open store {path}: it {problem}",
            where=layer.ctx.locate(f"{field}.path"),
            help="store_conf.path names a store file (or a folder holding shard.dat)",
        )
    try:
        store = cls()
        store.open(path, mode)
    except SingaError as err:
        if not os.path.isabs(path) and not os.path.exists(path):
            err.notes.append(
                f"relative paths are resolved from the current directory {os.getcwd()}"
            )
        if os.path.isdir(path):
            err.notes.append(f"{path} is a folder")
        raise err.located(layer.ctx.locate(field)) from None
    return store


def partition_batchsize(layer: Layer, batchsize: int, field: str) -> int:
    """``batchsize`` divided by the number of partitions when the layer is partitioned on
    the batch dimension (``partition_dim == 0``), as 0.3's DataLayer does."""
    bs = int(batchsize)
    if layer.conf.partition_dim == 0:
        bs //= max(int(layer.ctx.num_partitions), 1)
    if bs <= 0:
        n = max(int(layer.ctx.num_partitions), 1)
        if int(batchsize) <= 0:
            what = f"{field}.batchsize is {int(batchsize)}"
            how = "set batchsize to the number of records per step, e.g. `batchsize: 64`"
        else:
            what = f"{field}.batchsize {int(batchsize)} split across {n} partitions is {bs}"
            how = f"use a batchsize of at least {n} (one record per partition)"
        raise layer.error(
            f"layer '{layer.name}': the batch size must be positive; {what}",
            field=f"{field}.batchsize",
            help=how,
        )
    return bs


# -- records ---------------------------------------------------------------------------------
def parse_image_record(value: bytes, wrapper: common_pb2.Record, plain: common_pb2.RecordProto):
    """The RecordProto in ``value``: the ``image`` of a 0.1 ``Record`` wrapper, or the value
    itself when it is a bare RecordProto (what 0.3's converters write). ``wrapper`` and
    ``plain`` are reused message objects; raises DecodeError if neither parses.

    The two are told apart without ambiguity: RecordProto has no field 5 (``image``), and a
    Record always carries its image in field 5.
    """
    wrapper.ParseFromString(value)
    if wrapper.HasField("image"):
        return wrapper.image
    plain.ParseFromString(value)
    return plain


def fill_rows(rows: np.ndarray, records, bad) -> None:
    """Decode each record's values into a row of ``rows`` (``[batch, n]`` float32): its
    ``pixel`` bytes as unsigned bytes, or its ``data`` floats when it has no pixels (the
    0.1 parsers' order). ``bad(k, message)`` makes the error for record ``k``."""
    n = rows.shape[1]
    pixels = []
    for k, rec in enumerate(records):
        pixel = rec.pixel
        if pixel:
            if len(pixel) != n:
                raise bad(k, f"has {len(pixel)} pixel values, expected {n}")
            pixels.append((k, pixel))
        elif len(rec.data):
            if len(rec.data) != n:
                raise bad(k, f"has {len(rec.data)} data values, expected {n}")
            rows[k] = rec.data
        else:
            raise bad(k, "has neither pixel nor data values")
    if pixels and len(pixels) == len(records):  # the usual case: decode all in one go
        rows[...] = np.frombuffer(b"".join([p for _, p in pixels]), dtype=np.uint8).reshape(
            rows.shape
        )
    else:
        for k, pixel in pixels:
            rows[k] = np.frombuffer(pixel, dtype=np.uint8)


def record_source(layer: Layer, srcs) -> Layer:
    """The single source of a parser layer, which must expose records (kShardData)."""
    layer.expect_srcs(srcs)
    src = srcs[0]
    if not callable(getattr(src, "records", None)) or not callable(getattr(src, "sample", None)):
        raise layer.error(
            f"layer '{layer.name}' ({layer.type_names[0]}) parses records, but its source "
            f"'{src.name}' ({type(src).__name__}) provides none",
            field="srclayers",
            help="its source must be a kShardData layer; with kRecordInput/kCSVInput data "
            "and labels come from the input layer itself (use kImagePreprocess for crops)",
        )
    return src


def bad_record_maker(layer: Layer, src):
    """``bad(k, message)`` -> a SingaError naming record ``k`` of ``src``'s current batch."""

    def bad(k: int, message: str) -> SingaError:
        return layer.error(
            f"layer '{layer.name}': record '{key_text(src.keys()[k])}' of '{src.path}' {message}",
            field="srclayers",
            help="the store is damaged or not what this layer parses: re-create it with `singa "
            "data` (or the converter that wrote it), or point the layer at another store",
        )

    return bad


# -- mean files (kRGBImage) ------------------------------------------------------------------
_LEN = struct.Struct("<Q")


_CHECKED = 1 << 63  # a checksummed kvfile tuple (see singa_builtins.stores.kvfile)


def _single_kvfile_value(buf: bytes) -> bytes | None:
    """The first value if ``buf`` is exactly a chain of kvfile tuples (0.3's plain ones or
    singa's checksummed ones), else None; a checksummed tuple whose CRC-32 does not match
    raises ValueError."""
    import zlib

    size, off, first = len(buf), 0, None
    while off < size:
        if size - off < 16:
            return None
        (klen,) = _LEN.unpack_from(buf, off)
        checked = bool(klen & _CHECKED)
        klen &= ~_CHECKED
        ke = off + 8 + klen
        if ke + 8 > size:
            return None
        (vlen,) = _LEN.unpack_from(buf, ke)
        ve = ke + 8 + vlen
        end = ve + (4 if checked else 0)
        if vlen == 0 or end > size:
            return None
        if checked and zlib.crc32(buf[off:ve]) != int.from_bytes(buf[ve:end], "little"):
            raise ValueError(
                f"its record at byte offset {off} fails its checksum: its bytes changed "
                "after it was written"
            )
        if first is None:
            first = buf[ke + 8 : ve]
        off = end
    return first


def load_mean_file(path: str) -> np.ndarray:
    """The mean values in ``path`` (float32, flat); raises ValueError with the reason.

    A path containing "binaryproto" (0.3's test) holds a Caffe BlobProto, e.g. the
    ``mean.binaryproto`` of Caffe's ``compute_image_mean`` (``singa_builtins._caffe``;
    ``shape`` or num/channels/height/width, ``data`` or ``double_data``); any other path a
    serialized RecordProto whose ``data`` is the mean, either as the whole file (0.1's
    ``image_mean.bin``) or as the first tuple of a kvfile store (0.3's, e.g. from
    ``singa data cifar10``).
    """
    with open(path, "rb") as fh:
        buf = fh.read()
    if "binaryproto" in path:
        from singa_builtins._caffe import blob_values

        return blob_values(buf)[0]
    msg, what = common_pb2.RecordProto(), "a RecordProto"
    inner = _single_kvfile_value(buf)
    if inner is not None:
        buf, what = inner, "a kvfile store whose first value is a RecordProto"
    try:
        msg.ParseFromString(buf)
    except DecodeError:
        raise ValueError(f"it is not {what}") from None
    if not len(msg.data):
        raise ValueError(f"it holds no mean values (read as {what} with no data)")
    return np.asarray(msg.data, dtype=np.float32)


# -- crop / mirror (kImagePreprocess, kRGBImage) ---------------------------------------------
class ImageCropper:
    """Random (training) or central crop of ``cropsize`` and random horizontal mirror of a
    batch of ``[N, C, H, W]`` images, then a multiplication by ``scale``.

    Training: per image, offsets h ~ U{0..H−crop}, w ~ U{0..W−crop} and, with ``mirror``, a
    flip with probability 1/2, all drawn from ``rng`` (offsets for the batch, then the
    flips). Otherwise the central crop at ((H−crop)//2, (W−crop)//2), no flip. ``cropsize``
    0 (or equal to both H and W) means no crop.

    Every image is read once, through a (possibly reversed) strided view of its window, and
    written scaled into ``out``. Training loops over the batch: a gather through
    ``sliding_window_view`` plus fancy indexing (a copy, then the scaling) measured 1.5x
    slower for 256 images of 256x256, and under 1 ms faster for a CIFAR batch of 100.
    """

    def __init__(self, height: int, width: int, cropsize: int, mirror: bool, scale: float):
        self.height, self.width = height, width
        self.crop = int(cropsize)
        self.cropping = self.crop > 0 and (self.crop != height or self.crop != width)
        self.mirror = mirror
        self.scale = np.float32(scale)

    def __call__(self, src: np.ndarray, out: np.ndarray, train: bool, rng) -> None:
        n, scale = src.shape[0], self.scale
        ch, cw = (self.crop, self.crop) if self.cropping else (self.height, self.width)
        if not train:
            h0, w0 = (self.height - ch) // 2, (self.width - cw) // 2
            np.multiply(src[:, :, h0 : h0 + ch, w0 : w0 + cw], scale, out=out)
            return
        if self.cropping:
            hs = rng.integers(0, self.height - ch + 1, size=n).tolist()
            ws = rng.integers(0, self.width - cw + 1, size=n).tolist()
        else:
            hs = ws = [0] * n
        flips = (rng.random(n) < 0.5).tolist() if self.mirror else [False] * n
        if not self.cropping and not any(flips):
            np.multiply(src, scale, out=out)
            return
        for k, (h, w, flip) in enumerate(zip(hs, ws, flips, strict=True)):
            window = src[k, :, h : h + ch, w : w + cw]
            np.multiply(window[..., ::-1] if flip else window, scale, out=out[k])


def crop_scale_onnx(g, x: str, cropper: ImageCropper, name: str) -> str:
    """ONNX nodes of ``cropper`` outside training: the central crop (Slice), then the scale."""
    if cropper.cropping:
        h0, w0 = (cropper.height - cropper.crop) // 2, (cropper.width - cropper.crop) // 2
        starts = g.const([h0, w0], f"{name}/starts", np.int64)
        ends = g.const([h0 + cropper.crop, w0 + cropper.crop], f"{name}/ends", np.int64)
        axes = g.const([2, 3], f"{name}/axes", np.int64)
        x = g.add("Slice", [x, starts, ends, axes], name=f"{name}/crop")
    return g.add("Mul", [x, g.const(np.float32(cropper.scale), f"{name}/scale")], name=name)


def image_cropper(layer: Layer, height: int, width: int) -> ImageCropper:
    """An :class:`ImageCropper` from ``layer.conf.rgbimage_conf`` for images of
    ``height`` x ``width``; a bad cropsize or scale is a SingaError."""
    rc = layer.conf.rgbimage_conf
    crop = int(rc.cropsize)
    if crop < 0 or crop > min(height, width):
        raise layer.error(
            f"layer '{layer.name}': rgbimage_conf.cropsize {crop} does not fit images of "
            f"{height}x{width}",
            field="rgbimage_conf",
            help=f"use a cropsize from 1 to {min(height, width)}, or 0 for no crop",
        )
    if rc.scale == 0.0:
        raise layer.error(
            f"layer '{layer.name}': rgbimage_conf.scale is 0, which would zero every image",
            field="rgbimage_conf",
            help="leave scale unset (1) or give the factor to multiply pixels by",
        )
    return ImageCropper(height, width, crop, bool(rc.mirror), rc.scale)


# -- output layers writing stores (kCSVOutput, kRecordOutput) --------------------------------
def _close_store(store) -> None:
    store.close()


class StoreOutputLayer(OutputLayer):
    """Base of the output layers writing one tuple per instance to ``store_conf.path``.

    The store is created (kCreate) at the first forward, as 0.3 does, and flushed after each
    batch; :meth:`close` publishes it (the built-in stores write a temp file that their
    ``close`` renames into place). It is also closed when the layer is garbage-collected or
    at interpreter exit, whichever comes first. A forward after :meth:`close` reopens the
    file with kAppend and goes on. Keys are the running instance number.

    ``state_dict`` holds the number of instances written; a resumed layer first copies that
    many tuples of the existing output file into the new one, so the file reads as if the
    job had not stopped.
    """

    num_srclayers = (1, 1)
    default_backend = "kvfile"

    def setup(self, srcs):
        self.expect_srcs(srcs)
        if not self.conf.HasField("store_conf") or not self.conf.store_conf.path:
            raise self.error(
                f"layer '{self.name}' ({self.type_names[0]}) needs store_conf.path, "
                "the file to write",
                field="store_conf",
                help='add `store_conf { path: "output.csv" }`',
            )
        sc = self.conf.store_conf
        self.path = sc.path
        self.backend = sc.backend or self.default_backend
        self.check_backend(self.backend)
        store_class(self, self.backend, "store_conf")  # unknown backends fail here
        folder = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(folder):
            raise self.error(
                f"layer '{self.name}': cannot write {self.path}: folder {folder} does not exist",
                field="store_conf",
                help=f"create the folder first (mkdir -p {folder})",
            )
        problem = writable_file_problem(self.path)
        if problem:
            raise self.error(
                f"layer '{self.name}': cannot write {self.path}: {problem}",
                field="store_conf.path",
                help="store_conf.path names a file to create in a writable folder",
            )
        src = srcs[0]
        if src.data is None or src.data.ndim == 0 or src.data.shape[0] == 0:
            raise self.error(
                f"layer '{self.name}': source '{src.name}' has no data to write",
                field="srclayers",
                help="give the writer layer a source that outputs data (a data, parser or "
                "computing layer)",
            )
        self.batchsize = int(src.data.shape[0])
        self.dim = int(src.data.size // self.batchsize)
        if self.dim == 0:
            raise self.error(
                f"layer '{self.name}': source '{src.name}' has no values per instance "
                f"(shape {list(src.data.shape)})",
                field="srclayers",
                help="give the writer layer a source whose output has at least one value per "
                "instance",
            )
        self.count = 0
        self._resume_from = 0
        self.store = None
        self._finalizer = None
        self._published = False

    def check_backend(self, backend: str) -> None:
        """Subclass hook: reject backends the layer cannot write."""

    # -- writing --------------------------------------------------------------------------
    def _open(self):
        mode = KAPPEND if self._published else KCREATE
        store = open_store(self, self.backend, self.path, mode, "store_conf")
        self._finalizer = weakref.finalize(self, _close_store, store)
        self.store = store
        if self._resume_from and not self._published:
            self._copy_previous(self._resume_from)
        return store

    def _copy_previous(self, n: int) -> None:
        """Copy the first ``n`` tuples of the file being replaced (resume)."""
        if not os.path.exists(self.path):
            return
        old = open_store(self, self.backend, self.path, KREAD, "store_conf")
        try:
            for _ in range(n):
                rec = old.read()
                if rec is None:
                    break
                self.store.write(*rec)
        finally:
            old.close()

    def batch_labels(self, src: Layer) -> np.ndarray | None:
        labels = src.labels()
        if labels is not None and len(labels) < self.batchsize:
            raise self.error(
                f"layer '{self.name}': source '{src.name}' provides {len(labels)} labels "
                f"for a batch of {self.batchsize}",
                field="srclayers",
                help="the label source must give one label per instance: give it the same "
                "batchsize as the layer it writes",
            )
        return None if labels is None else labels[: self.batchsize]

    def write_values(self, values) -> None:
        """Write one value per instance (keys: running instance number), then flush."""
        store = self.store or self._open()
        for value in values:
            if not store.write(str(self.count).encode("ascii"), value):
                raise self.error(
                    f"layer '{self.name}': the {self.backend} store {self.path} refused "
                    f"instance {self.count}",
                    field="store_conf",
                    help="check the free disk space and the store's folder, or write with "
                    "another backend",
                )
            self.count += 1
        store.flush()

    def close(self) -> None:
        """Publish the output file (idempotent); a later forward appends to it."""
        if self._finalizer is not None:
            self._finalizer()
            self._published = True
        self._finalizer = None
        self.store = None

    # -- resume ---------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"instances": int(self.count)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        n = int(state.get("instances", 0))
        if self.store is None:
            self.count = self._resume_from = n


def deploy_sample_shape(layer: Layer, example: str) -> tuple[int, ...]:
    """A parser layer in a deploy net (its record source dropped): the raw sample shape the
    model is told (``job.model(sample_shape=...)``, ``singa predict --sample-shape``)."""
    shape = layer.ctx.sample_shape
    if not shape or any(int(s) <= 0 for s in shape):
        raise layer.error(
            f"layer '{layer.name}' ({layer.type_names[0]}) learns its image size from its "
            "records, which a deploy net does not read: give the size of one raw sample",
            field="srclayers",
            help="singa predict/export "
            + " ".join(f"--sample-shape {n.strip()}" for n in example.split(","))
            + f", or job.model(sample_shape=({example}))",
        )
    return tuple(int(s) for s in shape)


def skip_records(layer, n: int) -> None:
    """What ``n`` calls of ``layer._next()`` do (read a record, rewinding at the store's
    end), in time bounded by the store's size whatever ``n`` (``random_skip`` may be 10^9):
    once a whole pass from the start has counted the store's ``size`` records, whole
    cycles change nothing and only ``n % size`` more are read. The records the next read
    gives are those of ``n`` reads; an empty store is ``_next``'s error."""
    store = layer.store
    counted = None  # records read since the last rewind; None before the first rewind
    try:
        while n > 0:
            if store.read() is not None:
                n -= 1
                if counted is not None:
                    counted += 1
                continue
            if counted is not None:  # a whole pass from the start: the store's size
                if counted == 0:
                    layer._next()  # an empty store: its located error
                n %= counted
            store.seek_to_first()
            counted = 0
    except SingaError as err:  # a damaged store, located as the layer's own reads are
        raise err.located(layer.ctx.locate(getattr(layer, "conf_field", "store_conf"))) from None


def store_cursor(layer) -> dict:
    """A store-reading layer's resumable state: its store position and whether the first
    forward's random skip already happened."""
    return {"position": int(layer.store.position()), "skipped": bool(layer._skipped)}


def seek_store_cursor(layer, state: dict) -> None:
    """Put a store-reading layer back where :func:`store_cursor` found it."""
    if "position" in state:
        layer.store.seek(int(state["position"]))
    layer._skipped = bool(state.get("skipped", layer._skipped))
