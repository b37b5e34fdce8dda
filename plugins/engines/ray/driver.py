"""The driver: runs in the ``singa`` process, starts and watches the job's actors.

One attempt: check that the processes fit the cluster, place them (placement group), start
one :class:`~singa_builtins.engines.ray.process.SingaProcess` actor per SINGA process with
the values, versions and updater state the job starts from (put in the object store once),
then long-poll every actor's ``events``:

* ``("ready", worker)``: a worker built its net; when all have, every actor gets ``go``;
* ``("report", method, args, kwargs)`` from group 0 worker 0: forwarded to the Reporter
  (display, test and validation lines, progress, metrics.jsonl: on this machine);
* ``("checkpoint", step, records, state)``: written here with
  :func:`singa_core.running.checkpoint.write_checkpoint`, the path sent back;
* ``("done", worker, result)``, ``("error", role, text)``, ``("lost", role, text)``.

A poll that fails with a Ray actor error means the process (or its node) is gone. The
attempt is torn down (every actor killed, the placement group removed) and, with
``--max-restarts N``, the job is prepared again from its newest checkpoint (as ``--resume``
would) and started on the nodes that remain, up to N times; otherwise it stops with a
message naming the process, its role and node, and the newest checkpoint. Ctrl-C /
SIGTERM (to the ``singa`` process or to its whole process group, whose signal the private
runtime's processes do not receive: :mod:`.runtime`): the first asks every worker to stop
after its step (group 0 checkpoints; exit 130/143), a second tears down at once (exit
130/143); one before training starts ends the start-up cleanly (exit 130/143).
"""

from __future__ import annotations

import os
import signal
import time

from singa_builtins.engines.ray.placement import (
    bundle_nodes,
    check_fits,
    create_placement_group,
    process_requests,
)
from singa_builtins.engines.ray.runtime import Runtime
from singa_builtins.engines.ray.segments import check_nodes_room
from singa_builtins.engines.shm.context import job_shared
from singa_builtins.engines.shm.launcher import (
    initial_state,
    result_of,
    stopped_error,
)

from singa_core.engine import TrainResult
from singa_core.running import checkpoint as ckpt

POLL = 0.5  # seconds an actor holds the driver's events call when it has nothing to say
LOST_GRACE = 3.0  # seconds to find the dead process after a worker saw a peer vanish


class ProcessLost(Exception):
    """A SINGA process (its actor, or its node) is gone."""


class Driver:
    def __init__(self, engine) -> None:
        self.engine = engine
        self.options = engine.ray_options

    def run(self) -> TrainResult:
        engine, restarts = self.engine, 0
        with Runtime(self.options.address) as runtime:
            while True:
                try:
                    return Attempt(engine, runtime).run()
                except ProcessLost as lost:
                    if restarts >= self.options.max_restarts or runtime.signals.caught:
                        raise stopped_error(engine.prepared.workspace, str(lost)) from None
                    restarts += 1
                    engine = self._restart(engine, str(lost), restarts)

    def _restart(self, engine, lost: str, restarts: int):
        """A new engine for the same job, prepared from its newest checkpoint."""
        from singa_core.running.job import prepare_job

        prepared = engine.prepared
        latest = ckpt.latest_checkpoint(prepared.workspace)
        if latest is None:
            raise stopped_error(prepared.workspace, f"{lost}; nothing to restart from")
        engine.reporter.note(
            f"{lost}; restarting from the checkpoint of step {latest[0]} "
            f"(restart {restarts} of {self.options.max_restarts})"
        )
        again = prepare_job(
            prepared.cfg,
            prepared.host,
            resume=True,
            seed=prepared.seed,
            workspace=str(prepared.workspace),
        )
        new = type(engine)(again, engine.reporter)
        new.configure(engine.options)
        return new


class Attempt:
    """One start of the job's actors, from its start step to the end (or a fault)."""

    def __init__(self, engine, runtime) -> None:
        self.engine = engine
        self.runtime = runtime
        self.options = engine.ray_options
        self.topo = engine.topology
        self.actors: list = []
        self.pg = None
        self.where: list[dict] = []
        self.signals = runtime.signals  # installed by the runtime for its whole life

    def run(self) -> TrainResult:
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
        from singa_builtins.engines.ray.process import SingaProcess

        engine = self.engine
        nodes = self.runtime.nodes()
        requests = process_requests(
            self.topo, engine.layout, len(engine.state_names), self.options.cpus_per_worker
        )
        check_fits(requests, nodes, self.options.cpus_per_worker, engine.prepared.cfg.locate)
        self._check_startup_signal()
        start = initial_state(engine)
        shared = job_shared(
            engine,
            start.layer_states,
            segments=None,
            blas_threads=0,
            worker_queues={},
            server_queues={},
            abort=None,
            stop_signal=None,
            stop_at=None,
            ready=None,
        )
        prepared = engine.prepared
        if prepared.resume:  # the evaluations the checkpoint's step already did
            shared.extras["evaluated"] = list(prepared.resume_meta.get("evaluated", ()))
        # group 0 worker 0 sends Param histograms when the Reporter takes them
        shared.extras["param_histograms"] = getattr(engine.reporter, "param_histograms", False)
        try:
            self.pg = create_placement_group(requests, self.options.placement)
            placed = bundle_nodes(self.pg)
            by_id = {n.id: n for n in nodes}
            self.where = [
                {"node_id": placed.get(r.index, "?"), "address": getattr(
                    by_id.get(placed.get(r.index)), "address", "?")}
                for r in requests
            ]  # fmt: skip
            values, state = ray.put(start.values), ray.put(start.state)
            actor_cls = ray.remote(SingaProcess)
            for r in requests:
                opts = {
                    "num_cpus": r.cpus,
                    "max_restarts": 0,
                    "scheduling_strategy": PlacementGroupSchedulingStrategy(
                        self.pg, placement_group_bundle_index=r.index
                    ),
                }
                if r.memory:
                    opts["memory"] = r.memory
                self.actors.append(
                    actor_cls.options(**opts).remote(
                        r.index, shared, os.getcwd(), engine.process_blas_threads(r),
                        values, start.versions, state,
                    )
                )  # fmt: skip
            self.where = self._get_all([a.where.remote() for a in self.actors])
            self._check_startup_signal()
            self._check_shared_memory()
            engine.reporter.note(
                "ray: "
                + "; ".join(
                    f"{spec.role()} on {w['address']} (node {w['node_id'][:12]}, pid {w['pid']})"
                    for spec, w in zip(self.topo.procs, self.where, strict=True)
                )
            )
            self._get_all([a.start.remote(self.actors, self.where) for a in self.actors])
            del values, state  # every actor has made its servers: free the object store
            # every actor has attached its node's segments: their names can go
            self._get_all([a.unlink_segments.remote() for a in self.actors])
            result = self._supervise()
            self._note_traffic()
            return result
        finally:
            self._teardown()

    def _check_startup_signal(self) -> None:
        """A SIGINT/SIGTERM before the actors exist ends the start-up (exit 130/143)."""
        if self.signals.caught:
            sig = self.signals.caught[0]
            err = stopped_error(
                self.engine.prepared.workspace,
                f"{signal.Signals(sig).name} during start-up, before training began",
            )
            err.exit_code = 128 + int(sig)
            raise err

    def _check_shared_memory(self) -> None:
        """Each node's /dev/shm has room for what training will touch there (a missing page
        would kill the process touching it)."""
        # every actor of a node measured the same /dev/shm (its own segments untouched yet)
        free = {w["node_id"]: w["shm_free"] for w in self.where}
        labels = {w["node_id"]: f"{w['address']} (Ray node {w['node_id'][:12]})"
                  for w in self.where}  # fmt: skip
        node_of = [w["node_id"] for w in self.where]
        check_nodes_room(self.topo, self.engine.layout, node_of, free, labels)

    def _note_traffic(self) -> None:
        """A closing note of the parameter bytes that crossed between nodes."""
        try:
            counts = self._get_all([a.traffic_counts.remote() for a in self.actors])
        except Exception:  # noqa: BLE001 - the job is done; the note is not worth a failure
            return
        total = {k: sum(c[k] for c in counts) for k in counts[0]} if counts else {}
        if total.get("value_answers"):
            self.engine.reporter.note(
                f"ray: parameters between nodes: {total['grad_bytes'] / 1e6:.1f} MB of "
                f"gradients, {total['value_bytes'] / 1e6:.1f} MB of values "
                f"({total['value_copies']} value copies for {total['value_answers']} answers)"
            )

    # -- faults --------------------------------------------------------------------------------
    def _lost(self, index: int, exc: BaseException) -> ProcessLost:
        spec = self.topo.procs[index]
        w = self.where[index] if index < len(self.where) else {}
        node = f"{w.get('address', '?')} (Ray node {str(w.get('node_id', '?'))[:12]})"
        why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return ProcessLost(f"{spec.role()} on node {node} was lost ({type(exc).__name__}: {why})")

    def _get_all(self, refs: list) -> list:
        """One answer per actor, in order; a dead actor is a ProcessLost naming it."""
        import ray

        try:
            return ray.get(refs)
        except ray.exceptions.RayActorError:
            for i, ref in enumerate(refs):
                try:
                    ray.get(ref, timeout=LOST_GRACE)
                except ray.exceptions.RayActorError as exc:
                    raise self._lost(i, exc) from None
                except ray.exceptions.GetTimeoutError:
                    continue
            raise

    # -- the run -----------------------------------------------------------------------------
    def _supervise(self) -> TrainResult:
        import ray

        topo, reporter = self.topo, self.engine.reporter
        workers = {
            (g, j) for g in range(topo.nworker_groups) for j in range(topo.nworkers_per_group)
        }
        pending, ready = set(workers), set()
        leader_result = None
        handled = 0  # signals caught before this point are handled on the first pass
        lost_deadline, lost_text = None, None
        calls = {a.events.remote(POLL): i for i, a in enumerate(self.actors)}
        while pending:
            done, _ = ray.wait(list(calls), num_returns=1, timeout=0.25)
            for ref in done:
                i = calls.pop(ref)
                try:
                    messages = ray.get(ref)
                except ray.exceptions.RayActorError as exc:
                    raise self._lost(i, exc) from None
                for msg in messages:
                    kind = msg[0]
                    if kind == "ready":
                        ready.add(tuple(msg[1]))
                        if ready == workers:
                            for a in self.actors:
                                a.go.remote()
                    elif kind == "report":
                        _, method, args, kwargs = msg
                        getattr(reporter, method)(*args, **kwargs)
                    elif kind == "checkpoint":
                        _, step, records, state = msg
                        prepared = self.engine.prepared
                        path = ckpt.write_checkpoint(
                            prepared.workspace, step, 0, records, state,
                            keep=prepared.job.keep_checkpoints,
                        )  # fmt: skip
                        self.actors[i].deliver.remote(("checkpoint", step), str(path))
                    elif kind == "done":
                        pending.discard(tuple(msg[1]))
                        if tuple(msg[1]) == (0, 0):
                            leader_result = msg[2]
                    elif kind == "error":
                        _, role, text = msg
                        raise stopped_error(
                            self.engine.prepared.workspace, f"{role} failed:\n{text.rstrip()}"
                        )
                    elif kind == "lost" and lost_deadline is None:
                        lost_deadline = time.monotonic() + LOST_GRACE
                        lost_text = f"{msg[1]}: {msg[2]}"
                calls[self.actors[i].events.remote(POLL)] = i
            if lost_deadline is not None and time.monotonic() > lost_deadline:
                raise ProcessLost(f"a peer of {lost_text} was lost")
            while handled < len(self.signals.caught):
                sig = self.signals.caught[handled]
                handled += 1
                if handled == 1:
                    for a in self.actors:
                        a.stop.remote(int(sig))
                    reporter.note("stopping after this step (Ctrl-C again to abort now)")
                else:
                    err = stopped_error(
                        self.engine.prepared.workspace,
                        f"aborted by {signal.Signals(sig).name}",
                    )
                    err.exit_code = 128 + int(sig)  # 130/143, as the other engines
                    raise err
        return result_of(leader_result)

    def _teardown(self) -> None:
        """Kill this attempt's actors and remove its placement group (by handle)."""
        import ray
        from ray.util.placement_group import remove_placement_group

        for a in self.actors:
            try:
                ray.kill(a, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
        if self.pg is not None:
            try:
                remove_placement_group(self.pg)
            except Exception:  # noqa: BLE001 - already removed (its node is gone)
                pass
        self.actors, self.pg = [], None
