"""The entry point of every spawned process: its server and worker threads.

The main thread only supervises: it starts the threads, watches for the launcher's abort
event and for the launcher itself dying, and reports a thread's failure on the control
pipe. SIGINT and SIGTERM (a terminal's Ctrl-C, systemd, Slurm's scancel, ``timeout`` and
``kill -TERM -PGID`` signal the whole process group) are stop requests for the whole job,
as in the launcher: the first sets the job's stop signal, which the workers check after
every step; the launcher's second signal tears the job down. SIGKILL kills, and the
launcher names the process.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
import traceback

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def process_main(index: int, shared, ctrl) -> None:
    from singa_core.errors import show_singa_warnings

    show_singa_warnings()  # as the singa process prints them (one `warning:` line)

    # the launcher started this process with SIGINT/SIGTERM blocked (a signal during
    # start-up waits here instead of killing it or printing a traceback); from now on a
    # signal, to the process group or to this process alone, is a stop request for the
    # whole job: the workers stop after their current step and group 0 checkpoints
    def stop_request(signum, frame):
        if shared.stop_signal.value == 0:
            shared.stop_signal.value = int(signum)

    for sig in STOP_SIGNALS:
        signal.signal(sig, stop_request)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    from singa_core.blas import set_blas_threads

    set_blas_threads(shared.blas_threads)
    code = 0
    segs = None
    ctx = None
    try:
        segs, ctx = _setup(shared, ctrl)
        code = _run(index, shared, ctx)
    except BaseException as exc:  # noqa: BLE001 - reported to the launcher, then exit 1
        _report(ctrl, f"process {index}", exc)
        code = 1
    finally:
        finished = code == 0 and ctx is not None and not ctx.aborting()
        close_queues([*shared.worker_queues.values(), *shared.server_queues.values()], finished)
        if segs is not None:
            segs.close()
        ctrl.close()
    sys.exit(code)


# how long a process that finished its work waits for its queues' feeder threads to hand
# their last messages to the pipes (they normally take microseconds)
FLUSH_SECONDS = 5.0


def close_queues(queues, flush: bool) -> None:
    """Ready the job's queues for this process's exit.

    A queue's ``put`` hands the message to a feeder thread, which takes the queue's
    inter-process write lock, writes and releases it. A process that exits while its feeder
    is mid-send (the feeder is a daemon thread, frozen at interpreter shutdown) loses its
    last messages and leaves that lock held for good: every later ``put`` to the queue, in
    any process, then blocks, and the job hangs at its end. So a process that finished its
    work closes the queues and waits, at most FLUSH_SECONDS in all, for the feeders to send
    what they hold and quit. A process that is aborting does not wait: a peer killed while
    writing may hold a lock that no one will release.
    """
    if flush:
        deadline = time.monotonic() + FLUSH_SECONDS
        for q in queues:
            q.close()  # the feeder (if this process started one) sends what it holds, then quits
        for q in queues:
            feeder = getattr(q, "_thread", None)
            if feeder is not None:
                feeder.join(timeout=max(0.0, deadline - time.monotonic()))
    for q in queues:
        q.cancel_join_thread()  # a feeder still blocked (a dead peer's lock) does not hold the exit


def _report(ctrl, role: str, exc: BaseException) -> None:
    from singa_builtins.engines.shm.context import Aborted

    from singa_core.errors import SingaError

    if isinstance(exc, Aborted):
        return
    text = exc.format() if isinstance(exc, SingaError) else traceback.format_exc()
    try:
        if getattr(exc, "exit_code", None) == 3:  # NonFiniteError: the launcher re-raises it
            info = {"message": exc.message, "step": exc.step, "notes": exc.notes, "help": exc.help}
            ctrl.send(("non_finite", role, info))
        ctrl.send(("error", role, text))
    except (OSError, ValueError):
        pass


def _setup(shared, ctrl):
    from singa_builtins.engines.shm.context import ProcessContext
    from singa_builtins.engines.shm.segments import Segments

    prepared = prepared_job_of(shared)
    segs = Segments(shared.segments, create=False)
    return segs, ProcessContext(shared, segs, prepared, ctrl)


def prepared_job_of(shared):
    """The PreparedJob of the ``singa`` process, rebuilt in this process from the
    job's text, locations and overrides (plugins loaded first, for their extensions)."""
    from singa_core.jobconf.parse import JobConfig
    from singa_core.plugin_host.host import get_host
    from singa_core.running.job import PreparedJob
    from singa_core.schema import job_pb2

    host = get_host()  # loads the plugins (and their proto extensions) before parsing
    job = job_pb2.JobProto()
    job.ParseFromString(shared.job_bytes)
    cfg = JobConfig(
        job,
        shared.cfg_path,
        shared.cfg_text,
        dict(shared.cfg_locations),
        list(shared.cfg_overrides),
    )
    from singa_core.device import open_device

    prepared = PreparedJob(cfg=cfg, host=host, seed=shared.seed, workspace=shared.workspace_path)
    wheres = list(getattr(shared, "extras", {}).get("device_where", ()))  # the Ray engine's
    prepared.devices = [
        open_device(spec, wheres[j] if j < len(wheres) else "--device")
        for j, spec in enumerate(getattr(shared, "device_specs", []))
    ]
    return prepared


def _run(index: int, shared, ctx) -> int:
    from singa_builtins.engines.shm.server import ServerThread
    from singa_builtins.engines.shm.worker import WorkerThread

    spec = shared.topology.procs[index]
    failed = threading.Event()

    def guarded(role, make):
        try:
            make().run()
        except BaseException as exc:  # noqa: BLE001
            if not ctx.aborting():
                ctx_report(role, exc)
            failed.set()
            ctx.local_abort.set()

    def ctx_report(role, exc):
        with ctx._ctrl_lock:
            _report(ctx._ctrl, f"{role} ({spec.role()})", exc)

    roles = [
        (f"server {j} of server group {g}", f"server-{g}-{j}", ServerThread, g, j)
        for g, j in spec.servers
    ] + [
        (f"worker {j} of group {g}", f"worker-{g}-{j}", WorkerThread, g, j) for g, j in spec.workers
    ]
    threads = [
        threading.Thread(
            target=guarded,
            args=(role, lambda cls=cls, g=g, j=j: cls(ctx, g, j)),
            name=name,
            daemon=True,
        )
        for role, name, cls, g, j in roles
    ]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        for t in threads:
            t.join(timeout=0.2)
        if ctx.aborting():
            ctx.local_abort.set()
            for t in threads:  # they notice within one poll interval
                t.join(timeout=2)
            return 0 if not failed.is_set() else 1
    return 1 if failed.is_set() else 0
