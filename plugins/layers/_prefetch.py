"""Input that never stalls: an input layer's next batches made in a background thread.

An input layer that prefetches (kRecordInput/kCSVInput with ``store_conf.prefetching``,
kLMDBData with encoded Datums) splits its forward into

* ``_produce(phase, rngs)``: read the next batch's records from the store, decode them and
  compute everything the batch needs (for attached *stages* such as kImagePreprocess, their
  crop and mirror too), drawing random numbers only from ``rngs`` (name -> Generator);
* ``_consume(batch)``: copy a produced batch into the layer's (and its stages') outputs.

Without prefetching ``_produce`` runs in forward with the layers' own generators. With it a
:class:`Prefetcher` runs ``_produce`` one to ``depth`` batches ahead in a daemon thread, on
*copies* of the generators; every produced batch carries the store cursor and the generator
states reached after it, and consuming a batch makes those the layers' visible state (the
``state_dict`` and ``ctx.rng`` that checkpoints save). So the records, their order and the
random crop/mirror streams are those of the run without prefetching, and a checkpoint
written at any step resumes exactly.

Before taking a batch, forward compares the state the batch was made from with the layers'
visible state and phase. Anything that changed them — a resume (``load_state_dict`` and
the generators set by the checkpoint loader), an evaluation pass rewound after Ctrl-C, a
call with another phase — makes the thread stop and start again from the visible state.
"""

from __future__ import annotations

import queue
import threading
from typing import Any

_STOP_POLL = 0.05  # seconds between checks of the stop flag while the queue is full


def rng_state(gen) -> Any:
    return gen.bit_generator.state


def clone_rng(gen):
    """A new Generator of the same kind in the same state."""
    bitgen = type(gen.bit_generator)()
    bitgen.state = gen.bit_generator.state
    return type(gen)(bitgen)


class Prefetcher:
    """Runs ``produce()`` in a daemon thread, keeping up to ``depth`` results queued.

    ``produce()`` returns ``(batch, after)``; an exception ends the thread and is raised by
    the :meth:`get` that reaches it (a batch that failed is reported at the step that would
    have read it, as without prefetching).
    """

    def __init__(self, produce, depth: int, name: str) -> None:
        self._produce = produce
        self._queue: queue.Queue = queue.Queue(maxsize=max(int(depth), 1))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"singa-prefetch-{name}")
        self._thread.daemon = True
        self._thread.start()

    def _put(self, item) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=_STOP_POLL)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                item = ("ok", self._produce())
            except BaseException as exc:  # handed to the consumer, which raises it
                self._put(("error", exc))
                return
            if not self._put(item):
                return

    def get(self):
        while True:
            try:
                kind, value = self._queue.get(timeout=1.0)
                break
            except queue.Empty:
                if not self._thread.is_alive():
                    raise RuntimeError("the prefetch thread ended without a batch") from None
        if kind == "error":
            raise value
        return value

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


class PrefetchingInput:
    """Mixin for input layers; see the module docstring. The layer defines
    ``_produce(phase, rngs)``, ``_consume(batch)``, ``_cursor()`` (the store cursor state
    as a dict) and ``_seek_cursor(state)``; it calls :meth:`_init_prefetch` in ``setup``
    and :meth:`_forward_batch` from ``forward``."""

    prefetch_depth = 2

    def _init_prefetch(self, on: bool) -> None:
        self.prefetching = bool(on)
        self._stages: list = []  # layers whose per-batch work runs in _produce
        self._prefetcher: Prefetcher | None = None
        self._expect = None  # the visible state the next queued batch was made from
        self._visible: dict | None = None  # cursor after the last consumed batch

    # -- stages --------------------------------------------------------------------------
    def attach_stage(self, stage) -> bool:
        """Let ``stage`` (a consumer layer with ``stage_apply(phase, data, rng)`` and
        ``stage_take(result)``) do its per-batch work in this layer's producer. Accepted
        only while prefetching (otherwise it gains nothing)."""
        if not getattr(self, "prefetching", False):
            return False
        self._stages.append(stage)
        return True

    # -- running -------------------------------------------------------------------------
    def _layers(self) -> list:
        return [self, *self._stages]

    def _live_rngs(self) -> dict:
        return {k: layer.ctx.rng for k, layer in enumerate(self._layers())}

    def _visible_key(self, phase) -> tuple:
        cursor = self._visible if self._visible is not None else self._cursor()
        return (
            int(phase),
            repr(sorted(cursor.items())),
            *(repr(rng_state(layer.ctx.rng)) for layer in self._layers()),
        )

    def _forward_batch(self, phase) -> None:
        if not self.prefetching:
            self._consume(self._produce(phase, self._live_rngs()))
            return
        key = self._visible_key(phase)
        if self._prefetcher is None or self._expect != key:
            self._restart(phase, key)
        batch, (cursor, states) = self._prefetcher.get()
        self._consume(batch)
        self._visible = cursor
        for layer, state in zip(self._layers(), states, strict=True):
            layer.ctx.rng.bit_generator.state = state
        self._expect = self._visible_key(phase)

    def _restart(self, phase, key) -> None:
        self._stop_prefetch()
        if self._visible is not None:
            self._seek_cursor(self._visible)
        else:
            self._visible = self._cursor()
        rngs = {k: clone_rng(layer.ctx.rng) for k, layer in enumerate(self._layers())}
        order = sorted(rngs)

        def produce():
            batch = self._produce(phase, rngs)
            return batch, (self._cursor(), [rng_state(rngs[k]) for k in order])

        self._expect = key
        self._prefetcher = Prefetcher(produce, self.prefetch_depth, self.name)

    def _stop_prefetch(self) -> None:
        pf, self._prefetcher = self._prefetcher, None
        if pf is not None:
            pf.stop()
        self._expect = None

    # -- state ---------------------------------------------------------------------------
    def _visible_cursor(self) -> dict:
        """The cursor as the training sees it (after the last consumed batch)."""
        if self.prefetching and self._visible is not None:
            return dict(self._visible)
        return self._cursor()

    def _load_cursor(self, state: dict) -> None:
        self._stop_prefetch()
        self._seek_cursor(state)
        self._visible = self._cursor() if self.prefetching else None
