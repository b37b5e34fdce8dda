"""The driver: runs in the ``singa`` process, starts and watches the job's actors.

One attempt: check that the processes fit the cluster, ask every node for its versions and
/dev/shm room and have it remove dead jobs' segments (:mod:`.nodecheck`), plan the node of
every process (:func:`~singa_builtins.engines.ray.placement.plan`) and reserve it
(placement group), start one :class:`~singa_builtins.engines.ray.process.SingaProcess`
actor per SINGA process with the values, versions and updater state the job starts from
(put in the object store once), then long-poll every actor's ``events``:

* ``("ready", worker)``: a worker built its net; when all have, every actor gets ``go``;
* ``("report", method, args, kwargs)`` from group 0 worker 0: forwarded to the Reporter
  (display, test and validation lines, progress, metrics.jsonl: on this machine);
* ``("checkpoint", step, None, state)``: the values of server group 0 taken from its
  servers and written here (:mod:`.checkpoints`), the path sent back;
* ``("done", worker, result)``, ``("error", role, text)``, ``("lost", role, text)``.

Start-up (the node checks, the reservation, the actors' construction, every worker's net
built) has a deadline (``--startup-timeout``, default 60 s): what has not answered by then
stops the job naming only those processes, each with its node and what it was waiting for,
and a firewall only for a worker process on another node that does not answer
(:mod:`.startup`). Any Ray error that
reports a lost process, node or object (:mod:`.faults`) means the process (or its node) is
gone. The attempt is torn down (every actor killed, the placement group removed, the
attempt's shared-memory segments removed on every node that answers) and, with
``--max-restarts N``, the job is prepared again from its newest checkpoint (as ``--resume``
would) and started on the nodes that remain, up to N times; otherwise it stops with a
message naming the process, its role and node, and the newest checkpoint. Ctrl-C /
SIGTERM (to the ``singa`` process or to its whole process group, whose signal the private
runtime's processes do not receive: :mod:`.runtime`): the first asks every worker to stop
after its step (group 0 checkpoints; exit 130/143), a second tears down at once (exit
130/143); one before training starts ends the start-up cleanly (exit 130/143).
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import signal
import sys
import time

from singa_builtins.engines.ray import traffic
from singa_builtins.engines.ray.checkpoints import records_from_snapshots
from singa_builtins.engines.ray.faults import is_loss, summary
from singa_builtins.engines.ray.gpucheck import check_gpus
from singa_builtins.engines.ray.headwatch import HeadWatch, head_lost
from singa_builtins.engines.ray.nodecheck import check_nodes, clean_attempt
from singa_builtins.engines.ray.placement import (
    check_fits,
    create_placement_group,
    plan,
)
from singa_builtins.engines.ray.progress import GroupProgress
from singa_builtins.engines.ray.runtime import Runtime
from singa_builtins.engines.ray.segments import check_nodes_room
from singa_builtins.engines.shm.context import job_shared
from singa_builtins.engines.shm.launcher import (
    initial_state,
    result_of,
    stopped_error,
)

from singa_core.engine import TrainResult
from singa_core.errors import SingaError
from singa_core.running import checkpoint as ckpt
from singa_core.running.reporting import stop_note

POLL = 0.5  # seconds an actor holds the driver's events call when it has nothing to say
LOST_GRACE = 3.0  # seconds to find the dead process after a worker saw a peer vanish


def lost_grace() -> float:
    """:data:`LOST_GRACE` scaled by this machine's slowdown (:mod:`.machine`), at most 15 s:
    a loaded machine's live processes answer late, and are not lost for it."""
    from singa_builtins.engines.ray.machine import scaled

    return scaled(LOST_GRACE, cap=15.0)


HOLD_ENV = "SINGA_RAY_HOLD_AT"
FREE_RECHECKS = 3  # more looks at what is free before a job that fits the totals is refused
FREE_RECHECK_EVERY = 0.5  # seconds between them


def hold(stage: str) -> None:
    """The test hook ``SINGA_RAY_HOLD_AT=STAGE`` (nodes, reserve, actors, gate): the
    driver says so on stderr and waits there up to 60 s, so that a test can take the head
    away at that moment of start-up."""
    if os.environ.get(HOLD_ENV) != stage:
        return
    print(f"ray: holding at {stage} ({HOLD_ENV}, a test hook)", file=sys.stderr, flush=True)
    time.sleep(60)


def _break_hook() -> tuple[int, str] | None:
    """``SINGA_RAY_BREAK_BUILD=PROCESS:raise|exit|slow`` (a test hook; see
    process.break_build)."""
    from singa_builtins.engines.ray.process import BREAK_ENV

    index, _, how = os.environ.get(BREAK_ENV, "").partition(":")
    return (int(index), how) if index.isdigit() and how in ("raise", "exit", "slow") else None


DELAY_ENV = "SINGA_RAY_STEP_DELAY"


def _delay_hook() -> tuple[int, float] | None:
    """``SINGA_RAY_STEP_DELAY=GROUP:SECONDS`` (a test hook): worker 0 of worker group GROUP
    sleeps that long after each step (a group slower than the others)."""
    group, _, seconds = os.environ.get(DELAY_ENV, "").partition(":")
    try:
        return (int(group), float(seconds)) if group.isdigit() else None
    except ValueError:
        return None


class ProcessLost(Exception):
    """A SINGA process (its actor, or its node) is gone; ``node`` is its Ray node id when
    known."""

    def __init__(self, text: str, node: str | None = None) -> None:
        super().__init__(text)
        self.node = node


class Driver:
    def __init__(self, engine) -> None:
        self.engine = engine
        self.options = engine.ray_options

    def run(self) -> TrainResult:
        engine, restarts, suspect = self.engine, 0, frozenset()
        from pathlib import Path

        from singa_builtins.engines.ray.driverlog import LOG_NAME, RayReports

        reports = RayReports(Path(engine.prepared.workspace) / LOG_NAME, self.options.ray_log)
        with Runtime(self.options.address, insecure=self.options.insecure, reports=reports,
                     workspace=engine.prepared.workspace,
                     restarts=self.options.max_restarts) as runtime:  # fmt: skip
            while True:
                try:
                    return Attempt(engine, runtime, suspect).run()
                except ProcessLost as lost:
                    suspect = frozenset([lost.node] if lost.node else ())
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
            device=",".join(d.name for d in prepared.devices) or None,  # as prepared here
        )
        for name in ("device_override", "remote_device_specs"):  # the cluster's devices
            if hasattr(prepared, name):
                setattr(again, name, getattr(prepared, name))
        new = type(engine)(again, engine.reporter)
        new.configure(engine.options)
        return new


class Attempt:
    """One start of the job's actors, from its start step to the end (or a fault)."""

    def __init__(self, engine, runtime, suspect=frozenset()) -> None:
        self.engine = engine
        self.runtime = runtime
        self.suspect = suspect  # nodes where the previous attempt lost a process
        self.options = engine.ray_options
        self.topo = engine.topology
        self.actors: list = []
        self.pg = None
        self.where: list[dict] = []
        self.nodes: list = []
        self.node_of: list[str] = []
        self.expected = None
        self.attempt = secrets.token_hex(4)  # in every segment name of this attempt
        self.deadline = 0.0
        self.started = self.finished = 0.0  # the start gate opened; the last worker ended
        self.signals = runtime.signals  # installed by the runtime for its whole life
        self.driver_node = ""  # the Ray node id this driver runs on
        if runtime.guard is not None:  # the head lost: these segments removed here
            runtime.guard.attempts.add(self.attempt)

    def run(self) -> TrainResult:
        import ray

        engine = self.engine
        timeout = self.options.startup_timeout
        self.deadline = time.monotonic() + timeout
        nodes = self.nodes = self.runtime.nodes()
        driver_node = self.driver_node = ray.get_runtime_context().get_node_id()
        requests = engine.requests()
        self._check_startup_signal()
        try:
            # refused before anything waits for a node (the dry-run's order: a job that does
            # not fit is told as fast as its dry-run, however slow the nodes' tasks start)
            nodes = self.nodes = self._fit(requests, nodes)
            self._stage("nodes", "while the driver checked the nodes (their start-up tasks)")
            facts, gone = check_nodes(
                nodes,
                self.deadline,
                self.signals,
                self._check_startup_signal,
                self.suspect,
                timeout=timeout,
            )
            if gone:
                engine.reporter.note(
                    "ray: node(s) "
                    + ", ".join(n.label() for n in gone)
                    + " gone; placing the job on the "
                    + f"{len(nodes) - len(gone)} that remain"
                )
                nodes = self.nodes = [n for n in nodes if n.id in facts]
                nodes = self.nodes = self._fit(requests, nodes)
            self.node_of = plan(self.topo, requests, nodes, self.options.placement, driver_node)
            self.expected = traffic.expected(
                self.topo, engine.layout, self.node_of, len(engine.state_names), driver_node
            )
            by_id = {n.id: n for n in nodes}
            check_nodes_room(
                self.topo, engine.layout, self.node_of,
                {n: facts[n]["shm_free"] for n in self.node_of},
                {n: f"{by_id[n].address} (Ray node {n[:12]})" for n in self.node_of},
            )  # fmt: skip
            self.where = [
                {"node_id": n, "address": by_id[n].address, "pid": "?"} for n in self.node_of
            ]
            # a GPU worker's node opens its GPUs first (CuPy, a driver, the device)
            check_gpus(engine, requests, self.node_of, nodes, self.deadline,
                       self._check_startup_signal)  # fmt: skip
            return self._start_and_supervise(requests)
        except ProcessLost:
            raise
        except (ray.exceptions.RayError, OSError) as exc:
            if is_loss(exc):
                raise self._find_lost(exc) from None
            if isinstance(exc, OSError):
                raise
            raise stopped_error(engine.prepared.workspace, f"Ray reported {summary(exc)}") from None
        finally:
            self._teardown()

    def _fit(self, requests, nodes):
        """The nodes, once the job fits what they have free (:func:`check_fits` and a
        plan). Ray's view of what is free lags a moment behind what was just released (a
        job that ended a second ago): a job that fits the totals is given up to
        :data:`FREE_RECHECKS` more looks, :data:`FREE_RECHECK_EVERY` apart, before it is
        refused, unless live placement groups account for all that is in use
        (:meth:`Runtime.free_view_settled`: nothing was just released, and another look
        would say the same). The first look is the dry-run's check on the same view, before
        any task on a node, so such a refusal takes the dry-run's time."""
        engine = self.engine
        for tries in range(FREE_RECHECKS + 1):
            try:
                check_fits(
                    requests, nodes, self.options.cpus_per_worker, engine.prepared.cfg.locate,
                    engine.gpu_where(),
                )  # fmt: skip
                plan(self.topo, requests, nodes, self.options.placement, self.driver_node)
                return nodes
            except SingaError as refused:
                totals = [dataclasses.replace(n, free_cpus=None, free_memory=None,
                                              free_gpus=None) for n in nodes]  # fmt: skip
                try:
                    check_fits(requests, totals, self.options.cpus_per_worker, str)
                    plan(self.topo, requests, totals, self.options.placement, self.driver_node)
                except SingaError:
                    raise refused from None  # it does not fit the cluster at all
                if tries == FREE_RECHECKS or self.runtime.free_view_settled(nodes):
                    raise
            time.sleep(FREE_RECHECK_EVERY)
            self._check_startup_signal()
            fresh = {n.id: n for n in self.runtime.nodes()}
            nodes = [fresh.get(n.id, n) for n in nodes]
        return nodes

    def _start_and_supervise(self, requests) -> TrainResult:
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
        from singa_builtins.engines.ray.process import SingaProcess

        engine = self.engine
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
        # where each worker's device is named: an actor that cannot open it says so there
        shared.extras["device_where"] = [engine.device_where(j)
                                         for j in range(len(shared.device_specs))]  # fmt: skip
        hook = _break_hook()
        if hook is not None:
            shared.extras["break_build"] = hook
        delay = _delay_hook()
        if delay is not None:
            shared.extras["step_delay"] = delay
        self._stage("reserve", "while the driver reserved the job's resources (a placement group)")
        self.pg = create_placement_group(
            requests, self.node_of, max(0.5, self.deadline - time.monotonic()),
            tick=self._check_startup_signal,
        )  # fmt: skip
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
            if r.gpus:  # Ray gives the actor its GPUs (CUDA_VISIBLE_DEVICES)
                opts["num_gpus"] = r.gpus
            self.actors.append(
                actor_cls.options(**opts).remote(
                    r.index, shared, os.getcwd(), engine.process_blas_threads(r),
                    values, start.versions, state, self.attempt,
                )
            )  # fmt: skip
        self._stage("actors", "while the job's processes were built (its Ray actors)")
        self.where = self._startup_get(
            [a.where.remote() for a in self.actors], "starting the actors", building=True
        )
        for i, w in enumerate(self.where):
            if "broken" in w:
                raise self._broken_error(i, w)
        engine.reporter.note(
            "ray: "
            + "; ".join(
                f"{spec.role()} on {w['address']} (node {w['node_id'][:12]}, pid {w['pid']}"
                + (f", GPU {','.join(w['gpus'])}" if w.get("gpus") else "")
                + ")"
                for spec, w in zip(self.topo.procs, self.where, strict=True)
            )
        )
        self._startup_get(
            [a.start.remote(self.actors, self.where) for a in self.actors],
            "starting the worker threads",
        )
        del values, state  # every actor has made its servers: free the object store
        # every actor has attached its node's segments: their names can go
        self._startup_get([a.unlink_segments.remote() for a in self.actors], "sharing memory")
        self._stage("gate", "while the job's processes waited at the start gate")
        result = self._supervise()
        self._note_traffic(result)
        return result

    def _stage(self, name: str, doing: str) -> None:
        """Start-up reached stage ``name``: the head guard's error says what was happening
        (``doing``) should the head be lost now; then the test hook (:func:`hold`)."""
        if self.runtime.guard is not None:
            self.runtime.guard.doing = doing
        hold(name)

    def _check_startup_signal(self) -> None:
        """A SIGINT/SIGTERM before training starts ends the start-up (exit 130/143)."""
        if self.signals.caught:
            sig = self.signals.caught[0]
            err = stopped_error(
                self.engine.prepared.workspace,
                f"{signal.Signals(sig).name} during start-up, before training began",
            )
            err.exit_code = 128 + int(sig)
            raise err

    def _startup_error(self, late: list[int], stage: str, each: dict | None = None) -> SingaError:
        """The start-up deadline passed with processes ``late`` not answering: each named
        with its node and what it was waiting for (:mod:`.startup`); ``each`` maps a
        process to its own stage where it differs from ``stage``."""
        from singa_builtins.engines.ray.startup import Late, deadline_error, waiting_for

        out = []
        for i in late:
            w = self.where[i] if i < len(self.where) else {}
            node_id = str(w.get("node_id", "?"))
            label = f"{w.get('address', '?')} (Ray node {node_id[:12]})"
            waiting, unreachable = waiting_for(self._actor_row(i), (each or {}).get(i, stage))
            out.append(
                Late(self.topo.procs[i].role(), label, node_id == self.driver_node, waiting,
                     unreachable)
            )  # fmt: skip
        return deadline_error(self.options.startup_timeout, stage, out)

    def _actor_row(self, i: int) -> dict | None:
        """Process ``i``'s row of the GCS actor table (None when unknown or unreadable)."""
        if i >= len(self.actors):
            return None
        try:
            from ray._private import state

            return state.actors(actor_id=self.actors[i]._actor_id.hex()) or None
        except Exception:  # noqa: BLE001 - only a detail of the message
            return None

    def _startup_get(self, refs: list, stage: str, building: bool = False) -> list:
        """One answer per actor, in order, before the start-up deadline; signals end the
        start-up; a dead actor is a ProcessLost naming it (``building``: the actors are
        being built, and one that died says its own error: :meth:`_died_while_built`)."""
        import ray

        index = {ref: i for i, ref in enumerate(refs)}
        pending = list(refs)
        while pending:
            _, pending = ray.wait(pending, num_returns=len(pending), timeout=0.25)
            self._check_startup_signal()
            if pending and time.monotonic() > self.deadline:
                raise self._startup_error(sorted(index[r] for r in pending), stage)
        return self._get_all(refs, self._died_while_built if building else None)

    def _label(self, i: int) -> str:
        w = self.where[i] if i < len(self.where) else {}
        return f"{w.get('address', '?')} (Ray node {str(w.get('node_id', '?'))[:12]})"

    def _broken_error(self, i: int, w: dict) -> SingaError:
        """Process ``i``'s actor caught an error while it was built (its ``where`` says
        it): that error, located where it was, naming the process and its node."""
        b = w["broken"]
        role, node = self.topo.procs[i].role(), f"{w['address']} (Ray node {w['node_id'][:12]})"
        if b.get("where") or b.get("help"):  # a SingaError: located as the node located it
            return SingaError(
                f"{role} could not be built on node {node}: {b['message']}",
                where=b.get("where"), help=b.get("help"),
            )  # fmt: skip
        err = stopped_error(
            self.engine.prepared.workspace,
            f"{role} failed while it was built on node {node}: {b['message']}",
        )
        err.notes = [f"at {f}" for f in b.get("frames", ())]
        return err

    def _died_while_built(self, i: int, exc: BaseException) -> Exception:
        """Process ``i``'s actor died while it was built: its creation task's own error
        (Ray's text holds it), else what its worker process last wrote on its node."""
        from singa_builtins.engines.ray.startup import creation_error, dead_pid

        role, node = self.topo.procs[i].role(), self._label(i)
        cause = creation_error(exc)
        if cause:
            return stopped_error(
                self.engine.prepared.workspace,
                f"{role} failed while it was built on node {node}: {cause}",
            )
        lost = self._lost(i, exc)
        pid = dead_pid(exc) or int((self._actor_row(i) or {}).get("Pid") or 0)
        tail = self._worker_output(i, pid) if pid else ""
        if tail:
            text = f"{lost}; it died while it was built; its last output on that node:\n{tail}"
            return ProcessLost(text, lost.node)
        return lost

    def _worker_output(self, i: int, pid: int) -> str:
        """What process ``i``'s worker (``pid``) last wrote in its log on its node ("" when
        the node does not answer within :data:`LOST_GRACE`)."""
        import ray
        from singa_builtins.engines.ray.nodecheck import on_each_node
        from singa_builtins.engines.ray.startup import worker_output

        node = next((n for n in self.nodes if n.id == self.node_of[i]), None)
        if node is None:
            return ""
        try:
            (ref,) = on_each_node([node], worker_output, lambda n: (pid,))
            return ray.get(ref, timeout=lost_grace())
        except Exception:  # noqa: BLE001 - its node is gone or slow: Ray's words then
            return ""

    def _note_traffic(self, result: TrainResult) -> None:
        """A closing note of the parameter bytes that crossed between nodes."""
        try:
            counts = self._get_all([a.traffic_counts.remote() for a in self.actors])
        except Exception:  # noqa: BLE001 - the job is done; the note is not worth a failure
            return
        total = {k: sum(c.get(k, 0) for c in counts) for k in counts[0]} if counts else {}
        steps = result.final_step - self.engine.prepared.start_step
        if self.topo.nworker_groups > 1 and self.started and steps > 0:
            took = self.finished - self.started
            self.engine.reporter.note(
                f"ray: all {self.topo.nworker_groups} worker groups trained {steps} steps in "
                f"{took:.1f} s from the start gate to the last group's end "
                f"({1000 * took / steps:.1f} ms per step of the slowest group; the closing "
                "line's ms/step is group 0's)"
            )
        if len(set(self.node_of)) > 1:
            text = traffic.note(total, steps, self.expected)
            if text:
                self.engine.reporter.note(text)

    # -- faults --------------------------------------------------------------------------------
    def _lost(self, index: int, exc: BaseException) -> ProcessLost:
        spec = self.topo.procs[index]
        w = self.where[index] if index < len(self.where) else {}
        node = f"{w.get('address', '?')} (Ray node {str(w.get('node_id', '?'))[:12]})"
        return ProcessLost(
            f"{spec.role()} on node {node} was lost ({summary(exc)})", w.get("node_id")
        )

    def _find_lost(self, exc: BaseException) -> ProcessLost:
        """The process behind a loss Ray reported without naming it (an object, a node): the
        first actor that no longer answers, else a node no longer alive, else the error."""
        try:
            return self._probe_lost(exc)
        except Exception:  # noqa: BLE001 - Ray itself is failing here (the driver's raylet)
            return ProcessLost(f"the job's connection to Ray was lost ({summary(exc)})")

    def _probe_lost(self, exc: BaseException) -> ProcessLost:
        found = self._loss_among_processes(exc)
        if found is not None:
            return found
        return ProcessLost(f"a process, node or object of the job was lost ({summary(exc)})")

    def _loss_among_processes(self, exc: BaseException | None) -> ProcessLost | None:
        """The first process that no longer answers (or whose node is no longer alive), or
        None when every one answers."""
        import ray

        probes = {a.where.remote(): i for i, a in enumerate(self.actors)}
        if probes:
            done, _ = ray.wait(list(probes), num_returns=len(probes), timeout=lost_grace())
            for ref in sorted(probes, key=probes.get):
                if ref not in done:
                    continue
                try:
                    ray.get(ref)
                except (ray.exceptions.RayError, OSError) as err:
                    if is_loss(err):
                        return self._lost(probes[ref], err)
                    raise
            silent = [probes[r] for r in probes if r not in done]
            if silent:
                return self._lost(silent[0], exc or TimeoutError("no answer"))
        alive = {n.id for n in self.runtime.nodes()}
        for i, node in enumerate(self.node_of):
            if node not in alive:
                return self._lost(i, exc or ConnectionError("its node is no longer alive"))
        return None

    def _get_all(self, refs: list, died=None) -> list:
        """One answer per actor, in order; a dead actor is a ProcessLost naming it
        (``died(i, exc)``: the error to raise instead)."""
        import ray

        try:
            return ray.get(refs)
        except (ray.exceptions.RayError, OSError) as first:
            if not is_loss(first):
                raise
            for i, ref in enumerate(refs):
                try:
                    ray.get(ref, timeout=lost_grace())
                except ray.exceptions.GetTimeoutError:
                    continue
                except (ray.exceptions.RayError, OSError) as exc:
                    if is_loss(exc):
                        raise (died or self._lost)(i, exc) from None
            raise self._find_lost(first) from None

    def _write_checkpoint(self, step: int, records, state) -> str:
        """Checkpoint ``step``: the values of server group 0 from its servers (see
        checkpoints) unless the message carried them, written in the workspace."""
        prepared, topo = self.engine.prepared, self.topo
        if records is None:
            owners = {s: ps.index for ps in topo.procs for s in ps.servers}
            procs = [owners[(0, j)] for j in range(topo.nservers_per_group)]
            snaps: dict = {}
            parts = self._get_all(
                [self.actors[q].snapshot.remote(0, j) for j, q in enumerate(procs)]
            )
            for part in parts:
                snaps.update(part)
            records, arrays = records_from_snapshots(
                self.engine.layout, self.engine.state_names, snaps
            )
            state.arrays.update(arrays)
        path = ckpt.write_checkpoint(
            prepared.workspace, step, 0, records, state, keep=prepared.job.keep_checkpoints
        )
        return str(path)

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
        error_deadline, error_text = None, ""
        calls = {a.events.remote(POLL): i for i, a in enumerate(self.actors)}
        watch = HeadWatch(ray.get_runtime_context().gcs_address)
        job = self.engine.prepared.job
        progress = GroupProgress(topo.nworker_groups, job.disp_freq, job.train_steps,
                                 self.engine.prepared.start_step)  # fmt: skip
        while pending:
            if watch.lost():  # every Ray call would hang until Ray's own abort: leave now
                head_lost(
                    watch.address, watch.lost_for(), self.engine.prepared.workspace,
                    private=self.runtime.private, restarts=self.options.max_restarts,
                    doing="while the job trained" if self.started
                    else "while the job's processes waited at the start gate",
                )  # fmt: skip
            done, _ = ray.wait(list(calls), num_returns=1, timeout=0.25)
            for ref in done:
                i = calls.pop(ref)
                try:
                    messages = ray.get(ref)
                except (ray.exceptions.RayError, OSError) as exc:
                    if is_loss(exc):
                        raise self._lost(i, exc) from None
                    raise
                for msg in messages:
                    kind = msg[0]
                    if kind == "ready":
                        ready.add(tuple(msg[1]))
                        if ready == workers:
                            for a in self.actors:
                                a.go.remote()
                            self.started = time.monotonic()
                            if self.runtime.guard is not None:
                                self.runtime.guard.doing = "while the job trained"
                    elif kind == "report":
                        _, method, args, kwargs = msg
                        getattr(reporter, method)(*args, **kwargs)
                    elif kind == "checkpoint":
                        _, step, records, state = msg
                        path = self._write_checkpoint(step, records, state)
                        self.actors[i].deliver.remote(("checkpoint", step), path)
                    elif kind == "progress":
                        for g, step in msg[1].items():
                            progress.step(int(g), step)
                    elif kind == "done":
                        pending.discard(tuple(msg[1]))
                        if tuple(msg[1]) == (0, 0):
                            leader_result = msg[2]
                        g = msg[1][0]
                        if not any(w[0] == g for w in pending):
                            progress.done(g)
                    elif kind == "error" and error_deadline is None:
                        # a process whose node is going down may fail on its own first
                        # (a peer's pipe closes): a loss found within the grace wins
                        error_deadline = time.monotonic() + lost_grace()
                        error_text = f"{msg[1]} failed:\n{msg[2].rstrip()}"
                    elif kind == "lost" and lost_deadline is None:
                        lost_deadline = time.monotonic() + lost_grace()
                        lost_text = f"{msg[1]}: {msg[2]}"
                calls[self.actors[i].events.remote(POLL)] = i
            if ready == workers:
                line = progress.line()  # the slowest group still training (progress.py)
                if line:
                    reporter.note(line)
            if lost_deadline is not None and time.monotonic() > lost_deadline:
                raise ProcessLost(f"a peer of {lost_text} was lost")
            if error_deadline is not None and time.monotonic() > error_deadline:
                try:
                    lost = self._loss_among_processes(None)
                except Exception as exc:  # noqa: BLE001 - Ray itself is failing here
                    lost = ProcessLost(f"the job's connection to Ray was lost ({summary(exc)})")
                if lost is not None:
                    raise lost
                raise stopped_error(self.engine.prepared.workspace, error_text)
            if ready != workers and time.monotonic() > self.deadline:
                each: dict[int, list] = {}
                for ps in topo.procs:
                    for w in ps.workers:
                        if w not in ready:
                            each.setdefault(ps.index, []).append(w)
                raise self._startup_error(
                    sorted(each), "building the workers' nets",
                    {i: "building the net of worker(s) "
                        + ", ".join(f"{g}.{j}" for g, j in ws) for i, ws in each.items()},
                )  # fmt: skip
            while handled < len(self.signals.caught):
                sig = self.signals.caught[handled]
                handled += 1
                if ready != workers:  # before training began: end the start-up
                    self._check_startup_signal()
                if handled == 1:
                    for a in self.actors:
                        a.stop.remote(int(sig))
                    reporter.note(stop_note())
                else:
                    err = stopped_error(
                        self.engine.prepared.workspace,
                        f"aborted by {signal.Signals(sig).name}",
                    )
                    err.exit_code = 128 + int(sig)  # 130/143, as the other engines
                    raise err
        self.finished = time.monotonic()
        return result_of(leader_result)

    def _teardown(self) -> None:
        """Kill this attempt's actors, remove its placement group (by handle) and its
        shared-memory segments on every node that answers."""
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
        if self.actors:
            try:
                alive = [n for n in self.runtime.nodes() if n.id in set(self.node_of)]
            except Exception:  # noqa: BLE001 - the runtime is going
                alive = []
            clean_attempt(alive, self.attempt)
        self.actors, self.pg = [], None
