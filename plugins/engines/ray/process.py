"""The actor of one SINGA process: its servers and its worker threads (SINGA 0.3 §5.1).

The actor is an asyncio actor. Its event loop serves the calls other processes make:

* requests on its pipe (see :mod:`~singa_builtins.engines.ray.channels`) from the workers
  of its node, its own included: ``(sg, j, group, worker, slice, step, n, flags)``, the gradient
  slice being in that worker's gradient segment (see
  :mod:`~singa_builtins.engines.ray.segments`). The :class:`SliceServer` of server ``j`` of
  server group ``sg`` aggregates it with the rest of the group (synchronous within a group,
  asynchronous across groups); when the group's update is applied each such worker gets
  ``(slice, version)`` on its reply pipe and reads the value in the server's value segment
  (as the shm engine's workers do). A request for a server on another node is for this
  process as its node's gateway of the worker's group
  (:class:`~singa_builtins.engines.ray.gateway.NodeGateway`);
* ``push_many(items)``: the same for workers on other nodes, one call per batch of
  gradient slices (``(sg, j, group, worker, slice, step, n, grad)`` each); it answers
  ``[(version, value), ...]`` when every update is applied, one snapshot of a slice per
  update answering every such worker of the group (numpy arrays travel as whole buffers:
  Ray serialises them out of band); ``push_pieces(meta, *pieces)`` is the same for a
  small batch, cut into pieces that Ray carries inside its messages;
* ``sync(sg, j, from_group, slice, delta)``: the master side of the inter-group sync
  (distributed Hogwild); the requester's own sync runs as a task on its loop;
* ``deliver(key, item)``: bridge data and gradients of partitioned groups, other
  partitions' layer states for a checkpoint, the driver's "checkpoint written" answer;
* ``events(timeout)``: the driver's long poll for what the workers have to say (reports of
  group 0 worker 0, checkpoints to write, ready, done, errors);
* ``go``, ``stop(signal)``, ``set_stop_at(group, step)``: the start gate and Ctrl-C;
* ``where()`` (node, pid, segment names, pipe addresses), ``start(peers, places)`` (attach
  the segments and pipes of the same node's actors, start the worker threads),
  ``unlink_segments()``: start-up.

Worker threads (one per worker of the process) run :class:`RayWorker`; they block only
in their own thread, never on the loop.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import traceback
from collections import defaultdict, deque

import numpy as np
from singa_builtins.engines.ray.channels import (
    FLUSH,
    REGISTER,
    REPLY,
    REQUEST,
    SYNC_ANSWER,
    SYNC_REQUEST,
    Pipe,
    Writers,
    plan_pieces,
    send,
)
from singa_builtins.engines.ray.faults import is_loss, summary
from singa_builtins.engines.ray.gateway import NodeGateway, gateway_processes
from singa_builtins.engines.ray.segments import NodeSegments
from singa_builtins.engines.shm.segments import shm_free


class Aborted(Exception):
    """The process is being torn down."""


class Inbox:
    """Items by key, for worker threads to wait on (with abort checks)."""

    def __init__(self, ctx) -> None:
        self.ctx = ctx
        self.cond = threading.Condition()
        self.items: dict = defaultdict(deque)

    def put(self, key, item) -> None:
        with self.cond:
            self.items[key].append(item)
            self.cond.notify_all()

    def get(self, key, timeout: float | None = None):
        """The next item of ``key``; None after ``timeout`` seconds."""
        waited = 0.0
        with self.cond:
            while not self.items[key]:
                self.ctx.check_abort()
                if timeout is not None and waited >= timeout:
                    return None
                self.cond.wait(0.2)
                waited += 0.2
            return self.items[key].popleft()


class RayProcessContext:
    """What the worker threads of this process share (the Ray side of ProcessContext)."""

    def __init__(self, proc, shared, prepared) -> None:
        self.proc = proc
        self.shared = shared
        self.prepared = prepared
        self.local_abort = threading.Event()
        self.gate = threading.Event()
        self.stop_signal = 0
        self.stop_at: dict[int, int] = {}
        self.inbox = Inbox(self)

    def send(self, msg) -> None:
        self.proc.post(msg)

    def aborting(self) -> bool:
        return self.local_abort.is_set()

    def check_abort(self) -> None:
        if self.aborting():
            raise Aborted()

    def get(self, refs):
        """``ray.get`` that notices an abort while it waits. (It waits with ``ray.wait``:
        a ``ray.get`` that times out gives up the transfer of a large object under way.)"""
        import ray

        pending = refs if isinstance(refs, list) else [refs]
        while pending:
            _, pending = ray.wait(pending, num_returns=len(pending), timeout=0.5)
            if pending:
                self.check_abort()
        return ray.get(refs)


def actor_devices(shared, spec):
    """``shared`` with the device specs this actor opens: Ray gives an actor the GPUs its
    bundle asked for (``CUDA_VISIBLE_DEVICES``, seen here as ``cuda:0`` .. ``cuda:k-1``), so
    the k distinct GPU devices of its workers become those, in order; the GPU devices of
    workers that run elsewhere are not opened here (the CPU stands in for them)."""
    import dataclasses

    from singa_builtins.engines.ray.placement import gpu_devices_of

    specs = list(getattr(shared, "device_specs", []) or [])
    if not any(str(x).startswith(("cuda", "gpu")) for x in specs):
        return shared  # no real GPU (the stand-in needs no mapping)
    mine = [x for x in gpu_devices_of(spec, specs) if str(x).startswith(("cuda", "gpu"))]
    local = {x: f"cuda:{k}" for k, x in enumerate(mine)}
    specs = [local.get(x, "cpu" if str(x).startswith(("cuda", "gpu")) else x) for x in specs]
    return dataclasses.replace(shared, device_specs=specs)


BREAK_ENV = "SINGA_RAY_BREAK_BUILD"


SLOW_BUILD = 15.0  # seconds the test hook's "slow" process waits before its segments


def break_build(index: int, hook) -> None:
    """The test hook ``SINGA_RAY_BREAK_BUILD=PROCESS:raise|exit|slow`` (read by the driver,
    handed to the actors): process PROCESS fails while its actor is built, with a Python
    error or by its worker process exiting (after a line on its stderr); ``slow`` makes it
    wait :data:`SLOW_BUILD` s before it creates its segments (see :func:`slow_build`)."""
    if not hook or int(hook[0]) != index or hook[1] == "slow":
        return
    import sys

    print(f"singa test hook: process {index} breaks while it is built ({hook[1]})",
          file=sys.stderr, flush=True)  # fmt: skip
    if hook[1] == "exit":
        os._exit(3)
    raise RuntimeError(f"process {index} broke while it was built ({BREAK_ENV}, a test hook)")


def slow_build(index: int, hook) -> None:
    if hook and int(hook[0]) == index and hook[1] == "slow":
        import sys
        import time

        print(f"singa test hook: process {index} waits {SLOW_BUILD:g} s before its segments",
              file=sys.stderr, flush=True)  # fmt: skip
        time.sleep(SLOW_BUILD)


def build_failure(exc: BaseException) -> dict:
    """What the driver says of an actor that failed while it was built: a SingaError's
    parts (message, where, help), else the exception's line and the last frames of its
    traceback (``file:line in function``)."""
    from singa_core.errors import SingaError

    if isinstance(exc, SingaError):
        return {"message": exc.message, "where": str(exc.where) if exc.where else None,
                "help": exc.help, "text": exc.format()}  # fmt: skip
    line = f"{type(exc).__name__}: {exc}".strip()
    import ray

    ours = [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if not f.filename.startswith(os.path.dirname(ray.__file__))
    ]  # Ray's own left out
    frames = [f"{f.filename}:{f.lineno} in {f.name}" for f in ours]  # fmt: skip
    frames = frames[::-1][:4]  # the innermost first
    return {"message": line, "where": None, "help": None, "frames": frames}


class SingaProcess:
    def __init__(self, *args, **kwargs) -> None:
        # an error while the actor is built is kept and said by where(), with its text, so
        # that the driver names it (Ray would report a dead actor, the cause in a log file)
        self.broken = None
        self.segments = None
        try:
            self._build(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - reported to the driver by where()
            self.broken = build_failure(exc)
            if self.segments is not None:
                try:
                    self.segments.close()  # and unlinked
                except Exception:  # noqa: BLE001 - the driver removes the attempt's too
                    pass

    def _build(self, index, shared, cwd, blas_threads, values, versions, state, attempt="") -> None:
        import ray
        from singa_builtins.engines.shm.process import prepared_job_of

        from singa_core.blas import set_blas_threads

        set_blas_threads(blas_threads)
        if cwd and os.path.isdir(cwd):  # relative store paths mean what they mean there
            os.chdir(cwd)
        self.index = index
        self.shared = shared
        break_build(index, shared.extras.get("break_build"))
        topo, layout = shared.topology, shared.layout
        self.spec = topo.procs[index]
        self.prepared = prepared_job_of(actor_devices(shared, self.spec))
        # what the workers build their nets from: a private copy, so that the shared start
        # values do not stay pinned in this node's object store for the whole run
        self.values = np.array(values) if self.spec.workers else None
        self.versions = np.array(versions)
        self.worker_proc = {w: ps.index for ps in topo.procs for w in ps.workers}
        self.server_proc = {s: ps.index for ps in topo.procs for s in ps.servers}
        total = layout.total
        # the servers are made in start, once the driver has seen that this node's
        # /dev/shm has room for what they and the workers will touch (see where)
        self.start_values = values
        self.start_state = state
        self.servers: dict = {}

        # the node-shared memory: values of this process's slices (per server group), a
        # gradient buffer per worker, and per group of its workers the values it receives
        # if it turns out to be the node's gateway of the group (see start; untouched
        # pages cost nothing)
        self.segments = NodeSegments(index, ray.get_runtime_context().get_node_id(), attempt)
        self.names_gone = threading.Event()  # unlink_segments: nothing named is left
        self._guard_head(ray.get_runtime_context().gcs_address)
        slow_build(index, shared.extras.get("break_build"))
        for sg in sorted({sg for sg, _ in self.spec.servers}):
            self.segments.create(f"v{sg}", total)
        for g, j in self.spec.workers:
            self.segments.create(f"g{topo.worker_index(g, j)}", total)
        for g in sorted({g for g, _ in self.spec.workers}):
            self.segments.create(f"m{g}", total)
        if topo.nserver_groups > 1:  # the deltas and master values of same-node syncs
            for sg in sorted({sg for sg, _ in self.spec.servers}):
                self.segments.create(f"y{sg}", total)

        self.requests = Pipe() if self.spec.servers or self.spec.workers else None
        self.replies = {topo.worker_index(g, j): Pipe() for g, j in self.spec.workers}
        self.writers = Writers()
        self.request_fds: dict[int, int] = {}  # process of this node -> its request pipe
        self.reply_fds: dict[int, int] = {}  # worker index -> its reply pipe
        self.local: set[int] = {index}  # processes on this node (set by start)
        self.value_views: dict[tuple[int, int], np.ndarray] = {}  # (process, sg) -> values
        self.grad_views: dict[int, np.ndarray] = {}  # worker index -> its gradient buffer
        self.gateways: dict[int, int] = {}  # group -> its gateway process on this node
        self.mirrors: dict[int, np.ndarray] = {}  # group -> its gateway's values
        self.sync_views: dict[tuple[int, int], np.ndarray] = {}  # (process, sg) -> y<sg>
        self.gateway = NodeGateway(self)
        # server group -> it serves a single worker group and never syncs with another
        # server group (see push)
        self.sole_group = {
            sg: topo.nserver_groups == 1
            and sum(topo.server_group_of(g) == sg for g in range(topo.nworker_groups)) == 1
            for sg in range(topo.nserver_groups)
        }
        self.snapshots: dict = {}
        # parameter traffic with other nodes, for the driver's closing note (see traffic())
        self.traffic = dict.fromkeys(
            ("grad_bytes", "value_bytes", "sync_bytes", "value_copies", "value_answers"), 0
        )
        self.ctx = RayProcessContext(self, shared, self.prepared)
        self.group_steps: dict[int, int] = {}  # group -> its worker 0's last step (progress)
        self.steps_sent: dict[int, int] = {}
        self.outbox: list = []
        self.lock = threading.Lock()
        self.loop = None
        self.wake = None
        self.waiting: dict = defaultdict(list)
        self.peers: list = []
        self.threads: list[threading.Thread] = []

    def _guard_head(self, gcs_address: str) -> None:
        """For this process's whole life a thread watches the head as the driver does
        (:class:`~.headwatch.HeadWatch`, checked every second). Once the head is lost the
        driver is gone (exit 2) and can no longer have this actor's segments removed or its
        process ended, and Ray's raylet would keep it alive 60 s: so this actor removes its
        own segments' names (a segment it was still creating included) and ends its
        process, whose memory goes with it. The job cannot go on without the head."""
        from singa_builtins.engines.ray.headwatch import HeadWatch

        try:
            watch = HeadWatch(gcs_address)
        except ValueError:
            return

        def run() -> None:
            import sys

            while True:
                time.sleep(1.0)
                if not watch.lost():
                    continue
                n = 0 if self.names_gone.is_set() else self.segments.unlink()
                # in this worker's Ray log on its node
                print(f"singa: process {self.index} (pid {os.getpid()}) lost the head (its GCS "
                      f"at {gcs_address}): removed the names of its {n} shared-memory "
                      "segment(s) and ended its process", file=sys.stderr, flush=True)  # fmt: skip
                os._exit(3)

        threading.Thread(target=run, name="singa-head-watch", daemon=True).start()

    def _make_servers(self) -> None:
        """This process's servers, their slices' values (in the value segments) and updater
        state taken from the job's start."""
        from singa_builtins.engines.shm.server import SliceServer

        layout, topo = self.shared.layout, self.shared.topology
        total, values, state = layout.total, self.start_values, self.start_state

        def state_of(s):
            return {
                name: np.array(state[k * total + s.offset : k * total + s.offset + s.size])
                for k, name in enumerate(self.shared.state_names)
            }

        def value_of(sg, s):
            view = self.segments.arrays[f"v{sg}"][s.offset : s.offset + s.size]
            view[...] = values[s.offset : s.offset + s.size]
            return view

        self.servers = {
            (sg, j): SliceServer(
                layout,
                topo,
                sg,
                j,
                self.prepared.make_updater(),
                lambda s, sg=sg: value_of(sg, s),
                lambda s: self.versions[s.id],
                state_of,
            )
            for sg, j in self.spec.servers
        }
        self.start_values = self.start_state = None

    # -- handles of the other processes ------------------------------------------------------
    def server_handle(self, sg: int, j: int):
        return self.peers[self.server_proc[(sg, j)]]

    def worker_handle(self, group: int, wid: int):
        return self.peers[self.worker_proc[(group, wid)]]

    def route(self, sg: int, j: int, group: int) -> str:
        """How a worker of group ``group`` in this process reaches server ``j`` of server
        group ``sg``: ``own`` (this process), ``node`` (another process of this node: shared
        memory), ``gateway`` (another node, through the group's gateway on this node) or
        ``remote`` (another node, directly: the gradient and the value travel through Ray)."""
        q = self.server_proc[(sg, j)]
        if q == self.index:
            return "own"
        if q in self.local:
            return "node"
        return "gateway" if group in self.gateways else "remote"

    def mirror(self, group: int) -> np.ndarray:
        """The values the node's gateway of ``group`` received (flat, the server group's
        layout)."""
        return self.mirrors[group]

    def gateway_fd(self, group: int) -> int:
        """The request pipe of the node's gateway of ``group``."""
        return self.request_fds[self.gateways[group]]

    def count_traffic(self, **counts: int) -> None:
        """Add to the counts of :meth:`traffic_counts` (from the event loop only)."""
        for key, n in counts.items():
            self.traffic[key] += n

    def value_view(self, sg: int, j: int) -> np.ndarray | None:
        """Server group ``sg``'s flat values as server ``j``'s process keeps them, when that
        process is on this node (None otherwise)."""
        return self.value_views.get((self.server_proc[(sg, j)], sg))

    def grad_buffer(self, windex: int) -> np.ndarray:
        """The gradient segment of this process's worker ``windex``."""
        return self.segments.arrays[f"g{windex}"]

    # -- the driver's side ---------------------------------------------------------------------
    async def where(self) -> dict:
        import ray

        if self.broken is not None:
            return {
                "broken": self.broken, "address": ray.util.get_node_ip_address(),
                "node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid(),
            }  # fmt: skip
        return {
            "node_id": ray.get_runtime_context().get_node_id(),
            "address": ray.util.get_node_ip_address(),
            "pid": os.getpid(),
            "gpus": [str(g) for g in ray.get_gpu_ids()],  # the GPUs Ray gave this actor
            "shm_free": shm_free(),
            "segments": self.segments.names(),
            "requests": self.requests.address() if self.requests else None,
            "replies": {w: pipe.address() for w, pipe in self.replies.items()},
        }

    async def start(self, peers, places) -> None:
        """Make the servers, attach the segments of this node's other actors (``places``:
        every process's :meth:`where`), then start the worker threads (they build their
        nets, report ready, wait for go)."""
        from singa_builtins.engines.ray.worker import RayWorker

        self._make_servers()
        self.loop = asyncio.get_running_loop()
        self.wake = asyncio.Event()
        self.peers = list(peers)
        topo, total = self.shared.topology, self.shared.layout.total
        node = places[self.index]["node_id"]
        self.local = {q for q, w in enumerate(places) if w["node_id"] == node}
        # a group with two or more workers on this node reaches other nodes through the
        # lowest-numbered of its processes here (see gateway)
        gateways = gateway_processes(topo, [w["node_id"] for w in places])
        self.gateways = {g: q for (n, g), q in gateways.items() if n == node}
        my_worker_groups = {g for g, _ in self.spec.workers}
        my_groups = {topo.server_group_of(g) for g in my_worker_groups}
        my_servers = {sg for sg, _ in self.spec.servers}
        for q in sorted(self.local):
            for key, name in places[q]["segments"].items():
                kind, n = key[0], int(key[1:])
                if kind == "m" and not (n in my_worker_groups and self.gateways.get(n) == q):
                    continue  # not the mirror of a gateway of this process's workers
                if q == self.index:
                    arr = self.segments.arrays[key]
                elif (
                    (kind == "v" and n in my_groups) or kind in "gm" or (kind == "y" and my_servers)
                ):
                    arr = self.segments.attach(name, total)
                else:
                    continue
                if kind == "v":
                    self.value_views[(q, n)] = arr
                elif kind == "m":
                    self.mirrors[n] = arr
                elif kind == "y":
                    self.sync_views[(q, n)] = arr
                else:
                    group = n // topo.nworkers_per_group
                    if (
                        topo.server_group_of(group) in my_servers
                        or self.gateways.get(group) == self.index
                    ):
                        self.grad_views[n] = arr
                        self.reply_fds[n] = self.writers.open(places[q]["replies"][n])
            if places[q]["requests"] is not None and (self.spec.workers or my_servers):
                self.request_fds[q] = self.writers.open(places[q]["requests"])
        if self.requests is not None:
            self.loop.add_reader(self.requests.read_fd, self._on_requests)
        for g, j in self.spec.workers:
            role = f"worker {j} of group {g} ({self.spec.role()})"
            t = threading.Thread(
                target=self._guarded, args=(role, RayWorker, g, j), name=f"worker-{g}-{j}"
            )
            t.daemon = True
            t.start()
            self.threads.append(t)

    def _guarded(self, role, cls, g, j) -> None:
        from singa_core.errors import SingaError

        try:
            cls(self.ctx, g, j).run()
        except Aborted:
            pass
        except BaseException as exc:  # noqa: BLE001 - reported to the driver
            if is_loss(exc):  # another process, its node or an object is gone
                self.post(("lost", role, summary(exc)))
            elif not self.ctx.aborting():
                text = exc.format() if isinstance(exc, SingaError) else traceback.format_exc()
                self.post(("error", role, text))
            self.ctx.local_abort.set()

    def post(self, msg) -> None:
        """From a worker thread: a message for the driver."""
        with self.lock:
            self.outbox.append(msg)
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.wake.set)

    async def events(self, timeout: float) -> list:
        if not self.outbox and self.wake is not None:
            try:
                await asyncio.wait_for(self.wake.wait(), timeout)
            except TimeoutError:
                pass
        if self.wake is not None:
            self.wake.clear()
        with self.lock:
            out, self.outbox = self.outbox, []
        steps = dict(self.group_steps)  # worker threads set it; no message of its own
        if steps != self.steps_sent:
            out.append(("progress", steps))
            self.steps_sent = steps
        return out

    def note_step(self, group: int, step: int) -> None:
        """From worker 0 of ``group``, after each step: the driver's ``events`` carries it
        (see :mod:`~singa_builtins.engines.ray.progress`)."""
        self.group_steps[group] = step

    async def go(self) -> None:
        self.ctx.gate.set()

    async def stop(self, signum: int) -> None:
        self.ctx.stop_signal = signum

    async def set_stop_at(self, group: int, step: int) -> None:
        self.ctx.stop_at[group] = step

    async def traffic_counts(self) -> dict:
        """Bytes of gradients received from and values sent to other nodes' workers, of the
        syncs with master copies on other nodes (both ways), the value copies serialised and
        the answers that carried them."""
        return dict(self.traffic)

    async def unlink_segments(self) -> None:
        """Every actor of the node has attached: the names can go (see segments)."""
        self.segments.unlink()
        self.names_gone.set()

    async def deliver(self, key, item) -> None:
        self.ctx.inbox.put(tuple(key) if isinstance(key, list) else key, item)

    # -- servers -----------------------------------------------------------------------------
    def request_fd(self, sg: int, j: int) -> int:
        """The request pipe of server ``j`` of server group ``sg`` (a process of this node)."""
        return self.request_fds[self.server_proc[(sg, j)]]

    def _on_requests(self) -> None:
        """The event loop's reader of the request pipe."""
        slices = self.shared.layout.slices
        for sg, j, group, worker, sid, step, n, flags in self.requests.read_records(REQUEST):
            if flags & SYNC_REQUEST:  # sg j: the master; group, worker: the requester
                s = slices[sid]
                buf = self.sync_views[(worker, group)][s.offset : s.offset + s.size]
                self.servers[(sg, j)].merge_delta(sid, buf, buf)
                send(self.request_fds[worker], REQUEST, group, j, sg, self.index, sid, 0, 0,
                     SYNC_ANSWER)  # fmt: skip
                continue
            if flags & SYNC_ANSWER:
                s = slices[sid]
                buf = self.sync_views[(self.index, sg)][s.offset : s.offset + s.size]
                self.servers[(sg, j)].take_master(sid, buf)
                continue
            if flags & REGISTER:
                self.gateway.register(group, worker, sid, n)
                continue
            if sid >= 0 and self.server_proc[(sg, j)] != self.index:
                self.gateway.contribute(sg, j, group, worker, sid, step, n)
            elif sid >= 0:
                s = slices[sid]
                grad = self.grad_views[worker][s.offset : s.offset + s.size]
                fd = self.reply_fds[worker]
                self._apply(sg, j, group, worker, sid, step, n, grad,
                            lambda version, _value, fd=fd, sid=sid: send(fd, REPLY, sid, version),
                            False)  # fmt: skip
            if flags & FLUSH:
                self.gateway.flush_all()

    async def push_many(self, items) -> list:
        """Gradient slices from a worker on another node: ``[(version, value), ...]``."""
        return await self._push_items(items)

    async def push_pieces(self, meta, *pieces):
        """``push_many`` for a small batch cut into inline pieces (see
        :func:`~singa_builtins.engines.ray.channels.plan_pieces`): ``meta`` is every item
        but its gradient, ``pieces`` the gradients' pieces ``(item, start, array)``. The
        answer is cut by the same plan: one return value per piece, each a list of
        ``(item, version, start, array)``."""
        slices = self.shared.layout.slices
        sizes = [slices[m[4]].size for m in meta]
        grads = [np.empty(size, dtype=np.float32) for size in sizes]
        for piece in pieces:
            for item, start, chunk in piece:
                grads[item][start : start + len(chunk)] = chunk
        answers = await self._push_items([(*m, g) for m, g in zip(meta, grads, strict=True)])
        out = []
        for piece in plan_pieces(sizes):
            part = []
            for item, start, stop in piece:
                version, value = answers[item]
                part.append((item, version, start, value[start:stop]))
            out.append(part)
        return out[0] if len(out) == 1 else tuple(out)

    async def _push_items(self, items) -> list:
        futures = []
        for sg, j, group, worker, sid, step, n, grad in items:
            self.traffic["grad_bytes"] += grad.nbytes
            fut = self.loop.create_future()
            self._apply(sg, j, group, worker, sid, step, n, grad,
                        lambda version, value, fut=fut: fut.set_result((version, value)),
                        True)  # fmt: skip
            futures.append(fut)
        return list(await asyncio.gather(*futures))

    def _apply(self, sg, j, group, worker, sid, step, n, grad, answer, with_value) -> None:
        """Contribute a gradient slice; ``answer(version, value)`` once the group's update
        is applied (``value`` None unless ``with_value``)."""
        server = self.servers[(sg, j)]
        key = (sg, group, sid)
        self.waiting[key].append((answer, with_value))
        done = server.contribute(group, worker, sid, step, n, grad)
        if done is None:  # the rest of the group has not sent its part yet
            return
        version = done[0]
        waiters = self.waiting.pop(key)
        value = None
        remote = sum(1 for _, w in waiters if w)
        if remote:
            # the answer to the group's workers on other nodes. Ray serialises it (one copy
            # into the object store per answer) when the call returns, and a worker pushes
            # its next gradient of the slice only after it has the answer: with one worker
            # group on this server group and no inter-group sync, nothing changes the value
            # before the answer is serialised, so it goes as it is. Otherwise other groups'
            # updates (or a sync) change it in place meanwhile: one snapshot per update, in
            # a buffer reused from update to update. (Workers of this node read the value in
            # place, as the shm engine's do; several workers of one group on another node
            # are answered through their gateway there: one copy for all of them.)
            value = server.value(sid)
            self.traffic["value_copies"] += remote
            self.traffic["value_bytes"] += 4 * value.size * remote
            if not self.sole_group[sg]:
                snap = self.snapshots.get((sg, group, sid))
                if snap is None:
                    snap = self.snapshots[(sg, group, sid)] = np.empty_like(value)
                np.copyto(snap, value)
                value = snap
        self.traffic["value_answers"] += remote
        for answer, wants in waiters:
            answer(version, value if wants else None)
        if server.sync_due(sid):
            self.loop.create_task(self._sync(server, sid))

    async def _sync(self, server, sid) -> None:
        """Send this server group's changes of ``sid`` to the slice's master copy and take
        the other groups' changes from it: through the sync segments and pipes when the
        master is on this node (answered in ``_on_requests``), else by a Ray call."""
        s = self.shared.layout.slices[sid]
        q = self.server_proc[(s.master, s.server)]
        if q in self.local:
            buf = self.sync_views[(self.index, server.group)][s.offset : s.offset + s.size]
            server.sync_delta(sid, buf)
            send(self.request_fds[q], REQUEST, s.master, s.server, server.group, self.index, sid,
                 0, 0, SYNC_REQUEST)  # fmt: skip
            return
        delta = np.empty(s.size, dtype=np.float32)
        server.sync_delta(sid, delta)
        master = self.server_handle(s.master, s.server)
        value = await master.sync.remote(s.master, s.server, server.group, sid, delta)
        self.traffic["sync_bytes"] += delta.nbytes + value.nbytes  # to and from another node
        server.take_master(sid, value)

    async def sync(self, sg, j, from_group, sid, delta):
        out = np.empty_like(delta)
        self.servers[(sg, j)].merge_delta(sid, delta, out)
        return out

    async def snapshot(self, sg, j) -> dict:
        """Slice id -> (version, value, updater state) of server ``j`` of server group ``sg``."""
        shard = self.servers[(sg, j)].shard
        return {
            sid: (e.version, e.value.copy(), {k: a.copy() for k, a in e.state.items()})
            for sid, e in shard.entries.items()
        }

    async def wait_versions(self, sg, j, sids, target: int, timeout: float) -> None:
        """Return once every slice in ``sids`` of this server has reached ``target`` (or after
        ``timeout``): a partitioned group's checkpoint holds one step of every partition."""
        entries = self.servers[(sg, j)].shard.entries
        deadline = self.loop.time() + timeout
        while any(entries[s].version < target for s in sids) and self.loop.time() < deadline:
            await asyncio.sleep(0.005)
