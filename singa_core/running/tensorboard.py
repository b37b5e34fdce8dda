"""TensorBoard event files of a run: ``WORKSPACE/tensorboard/`` (optional extra).

Written through tensorboardX (``pip install 'singa-classic[tensorboard]'``, which also
installs ``tensorboard`` to view them). Without it a run prints one note and trains as
usual; the core never imports tensorboardX otherwise.

The :class:`~singa_core.running.reporting.Reporter` feeds a :class:`TensorBoardLog` with what it
shows, so every engine whose display worker reports through a Reporter gets the same logs:

* every metrics line as scalars ``<phase>/<metric>`` (``train/loss``, ``test/accuracy``,
  ``validation/loss`` ...) at its step, the same values as metrics.jsonl (stored as
  float32); the learning rate is the train metric ``lr`` (``train/lr``);
* ``train/step_ms``: the mean compute time of the training steps since the previous
  display, at each display step;
* with histograms on (``singa train --histograms``), every ``disp_freq`` steps each
  learnable Param's value and gradient as histograms ``param/<name>`` and
  ``grad/<name>`` (see :func:`param_histograms`; off by default: they read every value at
  each display, about 1-2 ms per million values, +4.6% per step for the MNIST MLP in
  benchmarks/tensorboard_logging.py).

A run starts its event file with TensorBoard's purge marker at its first step, so a
resumed run replaces what the interrupted one logged after its checkpoint and a new run in
the same workspace replaces the old run's curves (as metrics.jsonl reads).

**Written in the training thread, never by a background thread.** tensorboardX's
SummaryWriter hands events to a writer thread through a queue of 10; when that thread died
(a full disk under ``tensorboard/``) the queue filled and training blocked in ``put``
forever, deaf to the first SIGTERM. Here tensorboardX only builds the events (its
``summary`` functions and protos); :class:`EventFile` writes the records (TFRecord framing,
masked CRC-32C) to the file itself, from the thread that reports, flushing at most every
:data:`FLUSH_SECONDS` and when the run ends. A failed write is an ``OSError`` in that thread,
which the Reporter turns into the run's end: exit 2 naming the event file and the free space
of its own filesystem, the checkpoints intact, the same as a failed write of metrics.jsonl
(a run does not go on without the logs it was asked to keep).
"""

from __future__ import annotations

import socket
import struct
import sys
import time
from pathlib import Path

import numpy as np

from singa_core.contracts.stub import ParamStub

#: printed once per run when the writer library is missing
MISSING_NOTE = (
    "note: no TensorBoard logs for this run (pip install 'singa-classic[tensorboard]' "
    "to get WORKSPACE/tensorboard/)"
)

#: buffered events reach the event file at least this often (seconds), and at the end
FLUSH_SECONDS = 10.0

#: bucket counts of a histogram are taken over at most this many values of a tensor
HISTOGRAM_SAMPLE = 1 << 16
HISTOGRAM_BINS = 30


def _import_summary_writer():
    """tensorboardX's SummaryWriter, imported without PyTorch: tensorboardX imports torch
    when it is installed (only to accept torch tensors, which singa never logs), and that
    alone made a singa run about 200 MiB larger (benchmarks/peak_memory.py)."""
    if "torch" in sys.modules:  # already there: nothing to save
        from tensorboardX import SummaryWriter

        return SummaryWriter
    sys.modules["torch"] = None  # `import torch` raises ImportError, which it expects
    try:
        from tensorboardX import SummaryWriter
    finally:
        if sys.modules.get("torch", 0) is None:
            del sys.modules["torch"]
    return SummaryWriter


def _import_event_parts():
    """tensorboardX's event protos, summary builders and masked CRC, without PyTorch."""
    import logging

    _import_summary_writer()  # the same import guard (no torch)
    from tensorboardX import summary

    # a NaN loss is written as NaN (TensorBoard draws it); tensorboardX's own line for it,
    # "NaN or Inf found in input tensor.", is not printed: the numeric guard says where
    logging.getLogger("tensorboardX.x2num").setLevel(logging.ERROR)
    from tensorboardX.proto.event_pb2 import Event, SessionLog
    from tensorboardX.record_writer import masked_crc32c

    return summary, Event, SessionLog, masked_crc32c


class EventFile:
    """One TensorBoard event file, written synchronously by whoever calls :meth:`write`.

    Records are TFRecords: u64 length, masked CRC-32C of the length, the serialized Event,
    its masked CRC-32C. Data is flushed to the OS every :data:`FLUSH_SECONDS` and on
    :meth:`close`; every OS error surfaces as an ``OSError`` in the calling thread.
    """

    def __init__(self, logdir: Path, suffix: str) -> None:
        from singa_core.running.fileio import output_target

        _, self._event, _, self._crc = _import_event_parts()
        name = f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}{suffix}"
        self.path = Path(logdir) / name
        output_target(self.path, "TensorBoard event file")  # a new regular file
        self._fh = open(self.path, "xb")  # noqa: SIM115 - closed in close()
        self._last_flush = time.monotonic()

    def write(self, event) -> None:
        data = event.SerializeToString()
        head = struct.pack("<Q", len(data))
        self._fh.write(
            head + struct.pack("<I", self._crc(head)) + data + struct.pack("<I", self._crc(data))
        )
        if time.monotonic() - self._last_flush >= FLUSH_SECONDS:
            self.flush()

    def flush(self) -> None:
        self._fh.flush()
        self._last_flush = time.monotonic()

    def close(self) -> None:
        fh, self._fh = self._fh, None
        if fh is not None:
            try:
                fh.flush()
            finally:
                try:
                    fh.close()
                except OSError:
                    pass  # the flush above already reported the failure


def writer_problem(import_it: bool = True) -> str | None:
    """None when tensorboardX imports, else the one-line note saying why there are no logs.
    With ``import_it`` false, only whether it is installed (no import: ~0.3 s at idle, and
    several times that on a loaded machine, which a run that is refused before its first
    step should not pay)."""
    if not import_it:
        import importlib.util

        try:
            found = importlib.util.find_spec("tensorboardX") is not None
        except (ImportError, ValueError):
            found = False
        return None if found else MISSING_NOTE
    try:
        _import_summary_writer()
    except ImportError:
        return MISSING_NOTE
    except Exception as exc:  # noqa: BLE001 - a broken install (e.g. of torch, which it tries)
        return f"note: no TensorBoard logs for this run: tensorboardX failed to import ({exc})"
    return None


def writer_available() -> bool:
    return writer_problem() is None


class TensorBoardLog:
    """Event files in ``logdir``; see the module docstring for the tags."""

    def __init__(self, logdir: Path, *, histograms: bool = False, err=None) -> None:
        self.logdir = Path(logdir)
        self.err = err
        self.histograms_enabled = histograms
        self._writer = None
        self._step_seconds = 0.0
        self._steps = 0

    @classmethod
    def create(cls, logdir: Path, *, histograms: bool = False, err=None):
        """A log writing to ``logdir``, or None (after a one-line note on ``err``) when
        tensorboardX is not installed. It is imported when the run starts (:meth:`start`),
        not here: a run refused before its first step does not pay for it."""
        problem = writer_problem(import_it=False)
        if problem is not None:
            print(problem, file=err or sys.stderr)
            return None
        return cls(logdir, histograms=histograms, err=err)

    @property
    def path(self) -> Path:
        """The event file being written (its folder before the run starts)."""
        return self._writer.path if self._writer is not None else self.logdir

    def start(self, start_step: int) -> None:
        problem = writer_problem()  # installed (create), but it may not import
        if problem is not None:
            print(problem, file=self.err or sys.stderr)
            self.histograms_enabled = False
            return  # no writer: every later call is a no-op
        self._summary, Event, SessionLog, _ = _import_event_parts()  # noqa: N806 - classes
        self._Event = Event

        self.logdir.mkdir(parents=True, exist_ok=True)
        # TensorBoard reads a folder's files in name order: the suffix keeps the names of
        # two runs started within one second distinct and in start order.
        self._writer = EventFile(self.logdir, f".{time.time_ns()}")
        now = time.time()
        self._writer.write(Event(wall_time=now, file_version="brain.Event:2"))
        # the purge marker: TensorBoard drops the events earlier files hold at steps >=
        # start_step (what SummaryWriter's purge_step writes)
        self._writer.write(Event(wall_time=now, step=start_step, file_version="brain.Event:2"))
        self._writer.write(
            Event(
                wall_time=now,
                step=start_step,
                session_log=SessionLog(status=SessionLog.START),
            )
        )
        self._step_seconds, self._steps = 0.0, 0

    def _add(self, summary, step: int, walltime) -> None:
        self._writer.write(
            self._Event(
                wall_time=time.time() if walltime is None else walltime,
                step=int(step),
                summary=summary,
            )
        )

    def step_done(self, seconds: float) -> None:
        self._step_seconds += seconds
        self._steps += 1

    def scalars(self, phase: str, step: int, metrics: dict[str, float], walltime=None) -> None:
        if self._writer is None:
            return
        scalar = self._summary.scalar
        for name, value in metrics.items():
            self._add(scalar(f"{phase}/{name}", float(value)), step, walltime)
        if phase == "train" and self._steps:
            ms = 1000 * self._step_seconds / self._steps
            self._add(scalar("train/step_ms", ms), step, walltime)
            self._step_seconds, self._steps = 0.0, 0

    def histograms(self, step: int, hists: dict[str, dict]) -> None:
        """Write ``tag -> histogram`` (as :func:`histogram` returns) at ``step``."""
        if self._writer is None:
            return
        for tag, h in hists.items():
            self._add(self._summary.histogram_raw(tag, **h), step, None)

    def close(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()


def histogram(a: np.ndarray, bins: int = HISTOGRAM_BINS, sample: int = HISTOGRAM_SAMPLE):
    """A TensorBoard histogram of ``a``: exact ``min``, ``max``, ``num``, ``sum`` and
    ``sum_squares``; the ``bucket_counts`` over ``bins`` equal buckets between min and max
    are counted on a fixed pseudo-random sample of at most ``sample`` values, scaled to
    ``num`` (exact for smaller tensors). Returns the keyword arguments of tensorboardX's
    ``add_histogram_raw`` (plain floats and lists, cheap to send between processes)."""
    flat = a.reshape(-1)
    num = int(flat.size)
    if num == 0:
        return None
    lo, hi = float(flat.min()), float(flat.max())
    total = float(flat.sum())  # float32 pairwise summation
    squares = float(np.dot(flat, flat))
    if num > sample:
        part = flat[_sample_indices(num, sample)]
    else:
        part = flat
    if hi > lo:
        counts, edges = np.histogram(part, bins=bins, range=(lo, hi))
        limits = edges[1:].tolist()
    else:
        counts, limits = np.array([part.size]), [hi]
    counts = counts.astype(np.float64) * (num / part.size)
    return {
        "min": lo,
        "max": hi,
        "num": num,
        "sum": total,
        "sum_squares": squares,
        "bucket_limits": limits,
        "bucket_counts": counts.tolist(),
    }


_SAMPLES: dict[tuple[int, int], np.ndarray] = {}


def _sample_indices(num: int, sample: int) -> np.ndarray:
    key = (num, sample)
    if key not in _SAMPLES:  # fixed per size: the same positions at every display
        _SAMPLES[key] = np.sort(np.random.default_rng(num).integers(0, num, sample))
    return _SAMPLES[key]


def param_histograms(params, *, grads: bool = True) -> dict[str, dict]:
    """Histograms of each learnable Param's value (``param/<name>``) and, with ``grads``,
    its gradient buffer (``grad/<name>``) in ``params`` (e.g. a net's ``owner_params``)."""
    out = {}
    for p in params:
        if not p.learnable:
            continue
        arrays = [(f"param/{p.name}", p.value)]
        if grads:
            arrays.append((f"grad/{p.name}", p.grad))
        for tag, arr in arrays:
            h = histogram(arr)
            if h is not None:
                out[tag] = h
    return out


class GradientHistograms(ParamStub):
    """A worker's stub for one step that records the histogram of each learnable Param's
    gradient (``grad/<name>``) as the worker hands it over, before the server side
    (which may scale, clip or decay it in place) sees it; then passes the call on."""

    def __init__(self, inner: ParamStub) -> None:
        self.inner = inner
        self.hists: dict[str, dict] = {}

    def collect(self, param) -> None:
        self.inner.collect(param)

    def collect_all(self, params) -> None:
        self.inner.collect_all(params)

    def update(self, step: int, param) -> None:
        if param.learnable:
            h = histogram(param.grad)
            if h is not None:
                self.hists[f"grad/{param.name}"] = h
        self.inner.update(step, param)

    def __getattr__(self, name):  # engine-specific extras of the stub
        return getattr(self.inner, name)
