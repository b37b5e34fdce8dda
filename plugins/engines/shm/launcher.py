"""The launcher: creates the job's segments, spawns its processes and supervises them.

It runs in the ``singa`` process. It fills the segments (values, versions, updater state
of every server group; on ``--resume`` from the checkpoint), starts one process per
:class:`~singa_builtins.engines.shm.topology.ProcSpec` with the "spawn" start method, then waits
on the process sentinels and control pipes (``multiprocessing.connection.wait``) for:

* ``("report", method, args, kwargs)`` from group 0 worker 0: forwarded to the Reporter;
* ``("done", (group, id), result)``: a worker finished its loop; when all have, the
  servers get ``("stop",)``;
* ``("error", role, text)``: a thread failed; the job is torn down and the error raised;
* a sentinel firing before its process's workers are done: the process died (e.g.
  SIGKILL): the job is torn down within a few seconds and a SingaError names it.

Ctrl-C / SIGTERM: the first asks every worker group to stop after its current step (group
0 checkpoints, exit 130/143 as with the in-process engine); a second one tears down at
once. Segments are unlinked in every case.
"""

from __future__ import annotations

import multiprocessing as mp
import signal
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import wait

import numpy as np
from singa_builtins.engines.shm.context import job_shared
from singa_builtins.engines.shm.process import process_main
from singa_builtins.engines.shm.segments import (
    Segments,
    SegmentSpec,
    check_room,
    new_prefix,
    shm_free,
)

from singa_core.device import to_host
from singa_core.engine import TrainResult
from singa_core.errors import SingaError
from singa_core.running import checkpoint as ckpt
from singa_core.running.job import updater_type_name
from singa_core.running.numeric import NonFiniteError
from singa_core.running.reporting import stop_note

GRACE = 3.0  # seconds the processes get to leave after an abort before they are killed


def _exit_text(code: int | None) -> str:
    if code is None:
        return "did not exit"
    if code < 0:
        try:
            return f"died ({signal.Signals(-code).name})"
        except ValueError:
            return f"died (signal {-code})"
    return f"exited with status {code}"


@dataclass
class InitialState:
    """What every server group starts from (flat layout of :class:`ParamLayout`)."""

    values: np.ndarray  # float32, layout.total
    versions: np.ndarray  # int64, one per slice
    state: np.ndarray  # float32, len(state_names) blocks of layout.total
    layer_states: dict | None  # a resumed job's layer states (data cursors, random states)


def initial_state(engine) -> InitialState:
    """The values, versions and updater state a job starts from: the engine's full train
    net, and on ``--resume`` the checkpoint's updater state and layer states."""
    prepared, layout = engine.prepared, engine.layout
    owners = {p.id: p for p in engine.full_net.owner_params}
    arrays: dict[str, np.ndarray] = {}
    layer_states = None
    if prepared.resume:
        files = prepared.resume[1]
        state = ckpt.read_state(str(files[0]) + ckpt.STATE_SUFFIX, lazy=True)
        saved, current = state.meta.get("updater"), updater_type_name(prepared.job.updater)
        if saved and saved != current:
            raise SingaError(
                f"the checkpoint was trained with updater {saved} but job.conf now says {current}",
                where=str(files[0]),
                help="resume with the job.conf that wrote the checkpoint, or start a new "
                "job with checkpoint_path to fine-tune",
            )
        arrays = state.arrays
        layer_states = state.meta.get("layers") or None
    total = layout.total
    out = InitialState(
        np.zeros(total, dtype=np.float32),
        np.zeros(len(layout.slices), dtype=np.int64),
        np.zeros(total * len(engine.state_names), dtype=np.float32),
        layer_states,
    )
    for pid in layout.order:
        info, p = layout.params[pid], owners[pid]
        out.values[info.offset : info.offset + info.size] = to_host(p.value).reshape(-1)
        for sid in layout.param_slices[pid]:
            out.versions[sid] = p.version
        for k, sname in enumerate(engine.state_names):
            a = arrays.get(f"{info.name}::{sname}")
            if a is not None and a.size == info.size:
                out.state[k * total + info.offset : k * total + info.offset + info.size] = (
                    a.reshape(-1)
                )
    return out


def result_of(leader_result: dict | None) -> TrainResult:
    """The job's TrainResult from group 0 worker 0's ``done`` message."""
    r = leader_result or {}
    return TrainResult(
        r.get("final_step", 0),
        r.get("checkpoint"),
        r.get("metrics", {}),
        bool(r.get("interrupted")),
        r.get("stop_signal"),
    )


class SignalCatcher:
    """SIGINT / SIGTERM in the ``singa`` process, collected in ``caught`` while installed
    (only the main thread can install handlers; elsewhere nothing is caught)."""

    def __init__(self) -> None:
        self.caught: list[int] = []
        self._prev: dict = {}

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return

        def handler(signum, frame):
            self.caught.append(signum)

        self._prev = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}

    def restore(self) -> None:
        for s, h in self._prev.items():
            signal.signal(s, h)
        self._prev = {}


def _block_stop_signals():
    """Block SIGINT/SIGTERM in this thread (None where that is not possible)."""
    try:
        return signal.pthread_sigmask(signal.SIG_BLOCK, (signal.SIGINT, signal.SIGTERM))
    except (AttributeError, OSError, ValueError):
        return None


def _restore_signal_mask(old) -> None:
    if old is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def stopped_error(workspace, failure: str) -> SingaError:
    """The error of a job torn down by ``failure``, pointing at its newest checkpoint."""
    latest = ckpt.latest_checkpoint(workspace)
    where = (
        f"the newest complete checkpoint is {latest[1][0]} (step {latest[0]}); "
        "continue from it with `singa train --resume`"
        if latest
        else "no checkpoint was written; set checkpoint_freq to save along the way"
    )
    return SingaError(f"the job stopped: {failure}", help=where)


class Launcher:
    def __init__(self, engine) -> None:
        self.engine = engine
        self.prepared = engine.prepared
        self.reporter = engine.reporter
        self.topo = engine.topology
        self.layout = engine.layout
        self.ctx = mp.get_context("spawn")
        self.prefix = new_prefix()
        self._signals = SignalCatcher()
        self._non_finite: NonFiniteError | None = None

    # -- segments ------------------------------------------------------------------------
    def _segment_spec(self) -> SegmentSpec:
        topo, total = self.topo, self.layout.total
        spec = SegmentSpec(self.prefix)
        for sg in range(topo.nserver_groups):
            spec.add(f"v{sg}", "f4", total)
            spec.add(f"n{sg}", "i8", len(self.layout.slices))
            spec.add(f"s{sg}", "f4", total * len(self.engine.state_names))
            if topo.nserver_groups > 1:
                spec.add(f"y{sg}", "f4", total)
        for w in range(topo.nworkers):
            spec.add(f"g{w}", "f4", total)
        for pair in self.engine.bridges:
            spec.add(f"bd{pair.key}", "f4", pair.size)
            spec.add(f"bg{pair.key}", "f4", pair.size)
        return spec

    def _fill(self, segs: Segments) -> dict | None:
        """Initial values/versions/updater state in every server group; the layer states
        of a resumed job (for group 0)."""
        start = initial_state(self.engine)
        for sg in range(self.topo.nserver_groups):
            segs[f"v{sg}"][...] = start.values
            segs[f"n{sg}"][...] = start.versions
            segs[f"s{sg}"][...] = start.state
        return start.layer_states

    # -- the run -------------------------------------------------------------------------
    def run(self) -> TrainResult:
        topo = self.topo
        spec = self._segment_spec()
        check_room(spec.nbytes(), shm_free(), "this machine")
        segs = Segments(spec, create=True)
        procs: list = []
        queues: list = []
        try:
            layer_states = self._fill(segs)
            worker_queues = {
                (g, j): self.ctx.Queue()
                for g in range(topo.nworker_groups)
                for j in range(topo.nworkers_per_group)
            }
            server_queues = {
                (g, j): self.ctx.Queue()
                for g in range(topo.nserver_groups)
                for j in range(topo.nservers_per_group)
            }
            queues = [*worker_queues.values(), *server_queues.values()]
            shared = job_shared(
                self.engine,
                layer_states,
                segments=spec,
                blas_threads=self.engine.blas_threads(),
                worker_queues=worker_queues,
                server_queues=server_queues,
                abort=self.ctx.Event(),
                stop_signal=self.ctx.Value("i", 0, lock=False),
                stop_at=self.ctx.Array("i", [-1] * topo.nworker_groups, lock=False),
                ready=self.ctx.Value("i", 0),
                extras={"evaluated": list(self.prepared.resume_meta.get("evaluated", ()))}
                if self.prepared.resume
                else {},
            )
            # the display worker computes Param histograms only when the Reporter takes them
            shared.extras["param_histograms"] = (
                getattr(self.reporter, "param_histograms", False) is True
            )
            self._signals.install()
            readers = {}
            # children start with SIGINT/SIGTERM blocked (inherited through spawn's exec):
            # a signal to the process group during their start-up waits until their
            # handlers are in place (process_main) instead of killing them mid-import
            blocked = _block_stop_signals()
            try:
                for ps in topo.procs:
                    r, w = self.ctx.Pipe(duplex=False)
                    p = self.ctx.Process(
                        target=process_main,
                        args=(ps.index, shared, w),
                        name=f"singa-proc{ps.index}",
                    )
                    p.start()
                    w.close()
                    procs.append(p)
                    readers[r] = ps.index
            finally:
                _restore_signal_mask(blocked)
            return self._supervise(shared, procs, readers, server_queues)
        finally:
            self._teardown(procs, shared if procs else None)
            for q in queues:
                q.cancel_join_thread()
                q.close()
            self._signals.restore()
            segs.close()

    def _supervise(self, shared, procs, readers, server_queues) -> TrainResult:
        topo = self.topo
        pending_workers = {
            (g, j) for g in range(topo.nworker_groups) for j in range(topo.nworkers_per_group)
        }
        leader_result = None
        alive = {p.sentinel: i for i, p in enumerate(procs)}
        stopping_servers = False
        handled_signals = 0
        aborted_by = 0
        failure: str | None = None
        while alive and failure is None:
            ready = wait([*readers, *alive], timeout=0.25)
            for obj in [o for o in ready if o in readers]:
                try:
                    while obj.poll():
                        msg = obj.recv()
                        failure = self._handle(msg, pending_workers) or failure
                        if msg[0] == "done" and msg[1] == (0, 0):
                            leader_result = msg[2]
                except (EOFError, OSError):
                    del readers[obj]
            for obj in [o for o in ready if o in alive]:
                i = alive.pop(obj)
                procs[i].join(0.1)
                code = procs[i].exitcode
                spec = topo.procs[i]
                unfinished = [w for w in spec.workers if w in pending_workers]
                if failure is None and (
                    code != 0 or unfinished or not stopping_servers and spec.servers
                ):
                    failure = f"{spec.role()} {_exit_text(code)}"
            if failure is not None:
                break
            if not pending_workers and not stopping_servers:
                stopping_servers = True
                for q in server_queues.values():
                    q.put(("stop",))
            while handled_signals < len(self._signals.caught):
                sig = self._signals.caught[handled_signals]
                handled_signals += 1
                if handled_signals == 1:
                    shared.stop_signal.value = int(sig)
                    self.reporter.note(stop_note())
                else:
                    failure = f"aborted by {signal.Signals(sig).name}"
                    aborted_by = int(sig)
        if failure is not None:
            if self._non_finite is not None:
                raise self._non_finite
            err = stopped_error(self.prepared.workspace, failure)
            if aborted_by:
                err.exit_code = 128 + aborted_by  # 130/143, as the in-process engine
            raise err
        return result_of(leader_result)

    def _handle(self, msg, pending_workers) -> str | None:
        kind = msg[0]
        if kind == "report":
            _, method, args, kwargs = msg
            getattr(self.reporter, method)(*args, **kwargs)
        elif kind == "done":
            pending_workers.discard(tuple(msg[1]))
        elif kind == "non_finite" and self._non_finite is None:  # a NaN/inf stopped a worker
            _, role, info = msg
            self._non_finite = NonFiniteError(
                info["message"],
                step=info["step"],
                notes=[*info["notes"], f"seen by {role}"],
                help=info["help"],
            )
        elif kind == "error":
            _, role, text = msg
            return f"{role} failed:\n{text.rstrip()}"
        return None

    def _teardown(self, procs, shared) -> None:
        if not procs:
            return
        if any(p.is_alive() for p in procs) and shared is not None:
            shared.abort.set()
        deadline = time.monotonic() + GRACE
        for p in procs:
            p.join(max(0.0, deadline - time.monotonic()))
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join(1.0)
            if p.is_alive():
                p.kill()
                p.join(1.0)
