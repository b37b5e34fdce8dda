"""What every spawned process receives (picklable) and the helpers its threads share."""

from __future__ import annotations

import multiprocessing as mp
import queue
import threading
from dataclasses import dataclass, field
from pathlib import Path

from singa_builtins.engines.shm.layout import ParamLayout
from singa_builtins.engines.shm.segments import SegmentSpec
from singa_builtins.engines.shm.topology import Topology


class Aborted(Exception):
    """The job is being torn down (another process died, or the launcher is gone)."""


@dataclass(frozen=True)
class BridgePair:
    key: int  # index of the pair's segments (bd<key>, bg<key>)
    group: int
    src: str  # kBridgeSrc layer name (in partition src_part)
    dst: str  # kBridgeDst layer name (in partition dst_part)
    src_part: int
    dst_part: int
    size: int


@dataclass
class JobShared:
    """Everything a spawned process needs, handed over at spawn time."""

    cfg_path: str
    cfg_text: str
    cfg_locations: dict
    cfg_overrides: list
    job_bytes: bytes
    seed: int
    workspace: str
    start_step: int
    resumed: bool
    layer_states: dict | None
    topology: Topology
    layout: ParamLayout
    segments: SegmentSpec
    state_names: list[str]
    bridges: list[BridgePair]
    blas_threads: int
    worker_queues: dict  # (group, id) -> mp.Queue
    server_queues: dict  # (server group, id) -> mp.Queue
    abort: object  # mp.Event: tear down now
    stop_signal: object  # mp.Value('i'): a signal number asking for a stop after this step
    stop_at: object  # mp.Array('i') per worker group: last step to train (-1: none)
    ready: object  # mp.Value('i'): workers that have built their nets (the start gate)
    extras: dict = field(default_factory=dict)
    # each worker of a group's device spec ("cpu", "cuda:0", ...; see PreparedJob.devices)
    device_specs: list = field(default_factory=list)

    @property
    def workspace_path(self) -> Path:
        return Path(self.workspace)


def worker_device_specs(prepared) -> list[str]:
    """The device of each worker of a group: the devices opened here, or, for an engine
    whose workers run on other machines, the specs set aside for them (the Ray engine's
    GPUs, which this machine need not have: ``remote_device_specs``)."""
    remote = getattr(prepared, "remote_device_specs", None)
    return list(remote) if remote else [d.name for d in prepared.devices]


def job_shared(engine, layer_states, **transport) -> JobShared:
    """The JobShared of ``engine``'s job (a SharedMemoryEngine or a subclass); ``transport``
    gives the rest (segments, queues, events, blas_threads, extras)."""
    prepared = engine.prepared
    cfg = prepared.cfg
    return JobShared(
        cfg_path=cfg.path,
        cfg_text=cfg.text,
        cfg_locations=dict(cfg.locations),
        cfg_overrides=list(cfg.overrides),
        job_bytes=cfg.job.SerializeToString(),
        seed=prepared.seed,
        workspace=str(prepared.workspace),
        start_step=prepared.start_step,
        resumed=bool(prepared.resume),
        layer_states=layer_states,
        topology=engine.topology,
        layout=engine.layout,
        state_names=list(engine.state_names),
        bridges=list(engine.bridges),
        device_specs=worker_device_specs(prepared),
        **transport,
    )


class ProcessContext:
    """Per-process state shared by its worker and server threads."""

    def __init__(self, shared: JobShared, segments, prepared, ctrl) -> None:
        self.shared = shared
        self.segs = segments
        self.prepared = prepared
        self._ctrl = ctrl
        self._ctrl_lock = threading.Lock()
        self.local_abort = threading.Event()
        self._parent = mp.parent_process()

    def send(self, msg) -> None:
        with self._ctrl_lock:
            self._ctrl.send(msg)

    def aborting(self) -> bool:
        if self.shared.abort.is_set() or self.local_abort.is_set():
            return True
        if self._parent is not None and not self._parent.is_alive():
            return True
        return False

    def check_abort(self) -> None:
        if self.aborting():
            raise Aborted()


class Mailbox:
    """A thread's inbox: waits with a timeout (checking for abort), keeps messages that
    arrive while it waits for another kind."""

    POLL = 0.2

    def __init__(self, q, ctx: ProcessContext) -> None:
        self.q = q
        self.ctx = ctx
        self.stash: list[tuple] = []

    def get(self, timeout: float | None = None):
        """The next message (stashed first), or None after ``timeout``."""
        if self.stash:
            return self.stash.pop(0)
        waited = 0.0
        while True:
            try:
                return self.q.get(timeout=self.POLL)
            except queue.Empty:
                self.ctx.check_abort()
                waited += self.POLL
                if timeout is not None and waited >= timeout:
                    return None

    def wait(self, match):
        for i, m in enumerate(self.stash):
            if match(m):
                return self.stash.pop(i)
        while True:
            try:
                m = self.q.get(timeout=self.POLL)
            except queue.Empty:
                self.ctx.check_abort()
                continue
            if match(m):
                return m
            self.stash.append(m)
