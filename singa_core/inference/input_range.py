"""The range of values a model was trained on, and a warning when inputs are far from it.

A model takes raw samples, as its data layer read them from the training records, and
applies the data layer's own preprocessing. Inputs that were normalised already (``x/255``,
``(x - 127.5)/127.5``) or raw pixels given to a model trained on normalised records are not
errors a shape can show, but the predictions are near chance. :func:`trained_range` reads
the first records of the job's training store (a RecordProto store: ``data`` floats or
``pixel`` bytes; a ``textfile`` store: CSV lines) for the range seen in training, and
:func:`range_warning` compares an input's range with it.

Nothing is known (``None``, no warning) when the store is not there, cannot be read, or
holds records of another kind (encoded images, 0.1-style shard records).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

#: records read from the training store to learn its range
PEEK = 256


class InputRangeWarning(UserWarning):
    """Inputs far from the range of values the model was trained on."""


@dataclass(frozen=True)
class ValueRange:
    low: float
    high: float
    source: str  # where it was seen: the store's path

    @property
    def span(self) -> float:
        return self.high - self.low


def _train_store(job):
    """The store_conf of the training data layer (included in kTrain, or in every phase)."""
    from singa_core.schema import job_pb2

    kTrain = job_pb2.kTrain
    fallback = None
    for layer in job.neuralnet.layer:
        if not layer.HasField("store_conf") or not layer.store_conf.path:
            continue
        if kTrain in layer.include:
            return layer.store_conf
        if not layer.include and kTrain not in layer.exclude and fallback is None:
            fallback = layer.store_conf
    return fallback


def _csv_range(path: Path, conf, size: int) -> tuple[float, float] | None:
    sep = conf.separator or ","
    lo, hi = math.inf, -math.inf
    with open(path, encoding="utf-8", errors="replace") as fh:
        for n, line in enumerate(fh):
            if n >= PEEK:
                break
            tokens = [t for t in line.strip().split(sep) if t.strip()]
            if size and len(tokens) == size + 1:
                tokens = tokens[1:]
            try:
                values = [float(t) for t in tokens]
            except ValueError:
                return None
            if values:
                lo, hi = min(lo, *values), max(hi, *values)
    return (lo, hi) if lo <= hi else None


def _record_range(path: Path, conf, get_plugin) -> tuple[float, float] | None:
    from singa_core.schema import common_pb2

    store = get_plugin("store", conf.backend or "kvfile")()
    store.open(str(path), 1)  # KREAD
    lo, hi = math.inf, -math.inf
    try:
        for _ in range(PEEK):
            rec = store.read()
            if rec is None:
                break
            msg = common_pb2.RecordProto()
            msg.ParseFromString(rec[1])
            if len(msg.data):
                row = np.asarray(msg.data, dtype=np.float32)
            elif msg.pixel:
                row = np.frombuffer(msg.pixel, dtype=np.uint8)
            else:
                return None  # encoded images or another record kind
            lo, hi = min(lo, float(row.min())), max(hi, float(row.max()))
    finally:
        store.close()
    return (lo, hi) if lo <= hi else None


def trained_range(job, get_plugin) -> ValueRange | None:
    """The range of the raw values in the first :data:`PEEK` training records of ``job``
    (a JobProto), or None when it cannot be known."""
    conf = _train_store(job)
    if conf is None:
        return None
    path = Path(conf.path)
    if not path.is_file():
        return None
    try:
        if (conf.backend or "") == "textfile":
            found = _csv_range(path, conf, int(math.prod(conf.shape)) if conf.shape else 0)
        else:
            found = _record_range(path, conf, get_plugin)
    except Exception:  # any failure only means: no warning
        return None
    if found is None or not all(map(math.isfinite, found)):
        return None
    return ValueRange(found[0], found[1], str(path))


def _fmt(v: float) -> str:
    return f"{v:.4g}"


def range_warning(x: np.ndarray, expected: ValueRange | None) -> str | None:
    """A one-line warning when the values of ``x`` are far from ``expected``: they spread
    over less than 2% of its span (normalised inputs to a model of raw pixels), or reach
    more than half its span beyond it (raw inputs to a model of normalised values)."""
    if expected is None or x.size == 0 or expected.span <= 0:
        return None
    lo, hi = float(np.min(x)), float(np.max(x))
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return None  # NaN/inf are refused elsewhere
    span = expected.span
    narrow = 0 < hi - lo < 0.02 * span
    beyond = lo < expected.low - 0.5 * span or hi > expected.high + 0.5 * span
    if not (narrow or beyond):
        return None
    why = (
        "the inputs look normalised already"
        if narrow
        else "the inputs go far beyond what the model was trained on"
    )
    return (
        f"input values range over [{_fmt(lo)}, {_fmt(hi)}], but the model was trained on "
        f"raw values in [{_fmt(expected.low)}, {_fmt(expected.high)}] (the first records of "
        f"{expected.source}): {why}; the data layer applies the job's own preprocessing, so "
        "give the raw values (e.g. pixels 0-255), not normalised ones"
    )


def predict_noting_range(model, x) -> np.ndarray:
    """``model.predict(x)`` for the command line: an :class:`InputRangeWarning` becomes one
    ``warning: ...`` line on stderr instead of Python's warning text."""
    import sys
    import warnings

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", InputRangeWarning)
        out = model.predict(x)
    for w in seen:
        if issubclass(w.category, InputRangeWarning):
            print(f"warning: {w.message}", file=sys.stderr)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return out
