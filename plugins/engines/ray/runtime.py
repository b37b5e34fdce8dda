"""Where the Ray engine runs: a private one-node runtime, or a cluster made with
``ray start``.

Without ``--address`` (and without ``RAY_ADDRESS``) a private local runtime is started and
shut down at the end (its processes with it), with a random token of its own that only its
processes see (nothing is written to ``~/.ray``). With ``--address HOST:PORT`` or ``auto``
the job first asks the cluster's GCS whether it answers and checks tokens
(:mod:`singa_builtins.engines.ray.auth`: a clean error within seconds naming what is
missing; a cluster without token authentication only with ``--insecure``), then joins it as
a driver and leaves it running. Either way usage statistics are off and no dashboard is
started: Ray talks only to the cluster's own nodes. What Ray publishes to drivers (a dead
raylet's last log lines, ...) goes to the workspace's ray-driver.log with a one-line
pointer on the terminal (:mod:`singa_builtins.engines.ray.driverlog`).

Signals: while the runtime is up, SIGINT/SIGTERM to the ``singa`` process are collected in
``Runtime.signals`` (the driver turns them into a stop request). The private runtime's
processes (GCS, raylet, the actors' worker processes) start with SIGINT/SIGTERM blocked: a
signal to the whole process group (``kill -TERM -PGID``, systemd, Slurm, ``timeout``,
Ctrl-C) reaches only the driver, which stops the job with a checkpoint and then shuts the
runtime down by handle (``ray.shutdown`` kills the processes ``ray.init`` started; what it
leaves, such as the autoscaler monitor after a failed start, is ended by pid:
:func:`end_leftovers`, which walks /proc from this process).
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from singa_builtins.engines.ray.auth import PrivateToken, check_cluster, resolve_address
from singa_builtins.engines.ray.headwatch import HeadGuard, descendants, grace
from singa_builtins.engines.ray.initwatch import InitWatch
from singa_builtins.engines.ray.membership import check_driver
from singa_builtins.engines.shm.launcher import SignalCatcher

from singa_core.errors import SingaError
from singa_core.resources import usable_cpus

PIP_COMMAND = "pip install 'singa-classic[ray]'"


def ray_installed() -> bool:
    """Whether Ray can be imported (checked without importing it)."""
    try:
        return importlib.util.find_spec("ray") is not None
    except (ImportError, ValueError):
        return False


def import_ray():
    try:
        import ray
    except ImportError:
        raise SingaError(
            "the ray engine needs Ray, which is not installed",
            where="--engine ray",
            help=f"install it: {PIP_COMMAND}",
        ) from None
    return ray


def _block_stop_signals():
    """Block SIGINT/SIGTERM in this thread; the old mask (None where not possible)."""
    try:
        return signal.pthread_sigmask(signal.SIG_BLOCK, (signal.SIGINT, signal.SIGTERM))
    except (AttributeError, OSError, ValueError):
        return None


def process_tree(before: set[int]) -> dict[int, str]:
    """pid -> start time of this process's descendants that were not there ``before``
    (right after ``ray.init``: the processes it started, the roots of :func:`ray_tree`)."""
    return {p: t for p in descendants(os.getpid()) if p not in before and (t := _started(p))}


def ray_tree(roots: dict[int, str]) -> dict[int, str]:
    """pid -> start time of the ``roots`` that still run (same start time) and of all their
    descendants now: what the private runtime runs (Ray's agents and the actors' workers
    are its raylet's children). Taken before ``ray.shutdown``: once the raylet is gone its
    agents are nobody's descendants. Processes this program started itself after
    ``ray.init`` are not in it."""
    out = {}
    for root, started in roots.items():
        if _started(root) != started:
            continue
        out[root] = started
        for pid in descendants(root):
            if t := _started(pid):
                out[pid] = t
    return out


def end_leftovers(tree: dict[int, str], roots: dict[int, str] | None = None,
                  grace: float = 2.0) -> list[int]:  # fmt: skip
    """End what a private runtime's ``ray.shutdown`` left: the processes of ``tree`` (see
    :func:`ray_tree`) and of ``ray_tree(roots)`` that still run (after a failed start Ray's
    autoscaler monitor outlived this process; a runtime-env agent outlives its raylet when
    that is killed); SIGTERM, then SIGKILL after ``grace`` seconds; by pid, and only while
    a pid's start time is the one recorded. Their pids."""
    left = dict(tree)
    left.update(ray_tree(roots or {}))
    left = {p: t for p, t in left.items() if _started(p) == t}
    for pid in left:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_running(p) for p in left):
        time.sleep(0.05)
    for pid, started in left.items():
        if _running(pid) and _started(pid) == started:
            _signal(pid, signal.SIGKILL)
    for pid in left:  # reap this process's own children among them
        try:
            os.waitpid(pid, os.WNOHANG)
        except (ChildProcessError, OSError):
            pass
    return sorted(left)


def _started(pid: int) -> str:
    """``pid``'s start time (clock ticks after boot, from /proc), "" when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except OSError:
        pass


def _running(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    try:
        os.waitpid(pid, os.WNOHANG)  # a child of this process that has ended: reaped
    except (ChildProcessError, OSError):
        pass
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@dataclass(frozen=True)
class Node:
    id: str  # Ray node id (hex)
    address: str  # its IP address
    cpus: float
    memory: float  # bytes
    gpus: float = 0.0
    # what is free now (others' actors and placement groups hold the rest); None: all of it
    free_cpus: float | None = None
    free_memory: float | None = None
    free_gpus: float | None = None

    def label(self) -> str:
        return f"{self.address} (node {self.id[:12]})"

    @property
    def avail_cpus(self) -> float:
        return self.cpus if self.free_cpus is None else self.free_cpus

    @property
    def avail_memory(self) -> float:
        return self.memory if self.free_memory is None else self.free_memory

    @property
    def avail_gpus(self) -> float:
        return self.gpus if self.free_gpus is None else self.free_gpus

    def free_text(self) -> str:
        """``2 of 4 CPUs, 3.1 of 8.0 GiB memory, 0 of 1 GPUs free``."""
        return (
            f"{self.avail_cpus:g} of {self.cpus:g} CPUs, {self.avail_memory / 2**30:.1f} of "
            f"{self.memory / 2**30:.1f} GiB memory, {self.avail_gpus:g} of {self.gpus:g} GPUs free"
        )


def held_by_placement_groups(table: dict) -> dict[str, dict[str, float]]:
    """Node id -> the CPUs, memory and GPUs that live placement groups (state ``CREATED``)
    hold there, from Ray's placement-group table (``ray.util.placement_group_table()``:
    the GCS's own record, which a removal changes at once)."""
    held: dict[str, dict[str, float]] = {}
    for pg in table.values():
        if pg.get("state") != "CREATED":
            continue
        where = pg.get("bundles_to_node_id", {})
        for index, bundle in pg.get("bundles", {}).items():
            node = held.setdefault(where.get(index, ""), {})
            for key in ("CPU", "memory", "GPU"):
                node[key] = node.get(key, 0.0) + float(bundle.get(key, 0.0))
    return held


def free_view_settled(nodes: list[Node], held: dict[str, dict[str, float]]) -> bool:
    """Whether what Ray says is free on every node is all that live placement groups leave
    (``held``, :func:`held_by_placement_groups`): then a job that does not fit what is free
    will not fit a moment later either, and the refusal need not look again. False where
    more is in use than live placement groups explain: a job that ended a moment ago
    (Ray's view of what it released lags) or something outside placement groups."""
    for n in nodes:
        mine = held.get(n.id, {})
        for total, free, key, slack in (
            (n.cpus, n.free_cpus, "CPU", 1e-6),
            (n.memory, n.free_memory, "memory", 2.0**20),
            (n.gpus, n.free_gpus, "GPU", 1e-6),
        ):
            if free is not None and total - free > mine.get(key, 0.0) + slack:
                return False
    return True


GCS_WAIT_ENV = "RAY_gcs_server_port_wait_time_s"
GCS_WAIT = "10"  # seconds; Ray's default is 30, during which it holds the interpreter


@contextlib.contextmanager
def _bounded_gcs_wait():
    """Ray's wait for a new GCS's port file (the GCS lost while the private runtime
    starts) bounded to :data:`GCS_WAIT` seconds unless the user set it."""
    if os.environ.get(GCS_WAIT_ENV):
        yield
        return
    os.environ[GCS_WAIT_ENV] = GCS_WAIT
    try:
        yield
    finally:
        os.environ.pop(GCS_WAIT_ENV, None)


class Runtime:
    """The Ray runtime of one ``singa`` command (a context manager)."""

    def __init__(
        self, address: str | None, *, insecure: bool = False, reports=None, workspace=None,
        restarts: int = 0, checked: bool = False,
    ) -> None:  # fmt: skip
        text = str(address) if address else os.environ.get("RAY_ADDRESS") or None
        self.address = None if text == "local" else text  # Ray's word for a new runtime
        self.private = self.address is None
        self.insecure = insecure  # --insecure: join a cluster that checks no tokens
        self.checked = checked  # check_cluster already asked by the caller
        self.restarts = restarts
        self.workspace = workspace
        self._owned = False
        self._before: set[int] = set()  # this process's descendants before ray.init
        self._roots: dict[int, str] = {}  # the processes ray.init started (private runtime)
        self._token = PrivateToken()  # the private runtime's own token, in the environment
        self.signals = SignalCatcher()  # SIGINT/SIGTERM while the runtime is up
        self.reports = reports  # a driverlog.RayReports: Ray's published errors to a file
        # a training run: the head watched from before ray.init (headwatch.HeadGuard)
        self.guard = (
            HeadGuard(self.address, workspace, private=self.private, restarts=restarts)
            if workspace is not None
            else None
        )

    def describe(self) -> str:
        if self.private:
            return "a private one-node Ray runtime (shut down at the end)"
        return f"the Ray cluster at {self.address}"

    def __enter__(self) -> Runtime:
        from singa_builtins.engines.ray.machine import measure

        measure()  # this machine's slowdown, from this process's start-up (machine.py)
        ray = import_ray()
        os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
        if ray.is_initialized():  # e.g. a program that runs several jobs
            self.signals.install()
            return self
        gcs = None
        if not self.private and not self.address.startswith("ray://"):
            # before ray.init, which would take ~20 s to say little about a wrong token
            if not self.checked:
                warning = check_cluster(self.address, self.insecure)
                if warning:
                    print(warning, file=sys.stderr, flush=True)
            gcs = resolve_address(self.address)
            # and which waits 60 s and fails on a machine that is not a node
            check_driver(self.address, gcs)
        kwargs = dict(
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.ERROR,
            configure_logging=True,
        )
        # the processes ray.init starts inherit this thread's signal mask: with SIGINT/SIGTERM
        # blocked they never see a signal sent to the process group (only the driver acts
        # on it); a signal that arrives meanwhile waits and is then collected
        blocked = _block_stop_signals()
        _quiet_ray_threads(getattr(self.reports, "path", None))
        watch = self._init_watch(gcs) if gcs else contextlib.nullcontext()
        self._before = set(descendants(os.getpid())) if self.private else set()
        if self.guard is not None:
            self.guard.start()
        try:
            try:
                if self.private:
                    self._token.install()  # Ray would write ~/.ray/auth_token otherwise
                    with _bounded_gcs_wait():
                        ray.init(address="local", num_cpus=usable_cpus(), **kwargs)
                else:
                    with watch:  # the head lost inside ray.init: exit 2 all the same
                        ray.init(address=self.address, **kwargs)
            except Exception as exc:  # any class: Ray raises bare Exceptions at start-up too
                lost = None
                if self.guard is not None:
                    self.guard.stop()
                    lost = self.guard.private_down() if self.private else None
                tree = process_tree(self._before) if self.private else {}  # ray.init's
                try:
                    ray.shutdown()  # whatever ray.init had started (a no-op when nothing)
                except Exception:  # noqa: BLE001 - the original error is what to report
                    pass
                finally:
                    if self.private:
                        self._token.restore()
                        end_leftovers(ray_tree(tree), tree)
                if lost is not None:  # its GCS exited while ray.init waited for it
                    from singa_builtins.engines.shm.launcher import stopped_error

                    raise stopped_error(
                        self.guard.workspace,
                        "lost the private Ray runtime's GCS while the runtime started "
                        f"(ray.init: {type(exc).__name__})",
                    ) from None
                raise self._init_error(exc) from None
            if self.private:
                self._roots = process_tree(self._before)
            if self.guard is not None:
                self.guard.joined(ray.get_runtime_context().gcs_address)
                self.guard.doing = "while the driver prepared the job"
            # after ray.init, which installs its own SIGTERM handler in this process
            self.signals.install()
            if self.reports is not None:  # after ray.init, which sets Ray's printing up
                self.reports.install()
        finally:
            if blocked is not None:
                signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        self._owned = True
        return self

    def _init_watch(self, gcs: str) -> InitWatch:
        """The watcher of ``ray.init`` (:mod:`.initwatch`) with the located error it prints
        if the head is lost meanwhile."""
        from singa_builtins.engines.shm.launcher import stopped_error

        what = (
            f"lost the head node (its GCS at {gcs}) while this machine joined the cluster "
            "(inside Ray's ray.init): no connection for {down} s"
        )
        if self.workspace is not None:
            err = stopped_error(self.workspace, what)
            err.help = (err.help or "") + "; restart the head (and the nodes) first"
        else:
            err = SingaError(what, where="--address",
                             help="restart the head (and the nodes), then run the command "
                             "again")  # fmt: skip
        interrupted = SingaError(
            f"interrupted while joining the Ray cluster at {self.address} (inside Ray's "
            "ray.init, which holds the process: exit 2): nothing of the job had started",
            where="--address",
            help="run the command again",
        )
        return InitWatch(gcs, err.format(), interrupted.format(), grace())

    def _init_error(self, exc: Exception) -> SingaError:
        import ray

        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        cause = f"{type(exc).__name__}: {lines[0] if lines else '(no message)'}"
        if self.private:
            return SingaError(
                f"cannot start a private Ray runtime: {cause}",
                where="--engine ray",
                help="Ray's logs are in /tmp/ray/session_latest/logs; or join a cluster with "
                "--address HEAD:PORT",
            )
        if isinstance(exc, ray.exceptions.AuthenticationError):
            return SingaError(
                f"the Ray cluster at {self.address} did not accept this process: {cause}",
                where="--address",
                help="every node and this machine need RAY_AUTH_MODE=token and the head's "
                "token: copy the head's ~/.ray/auth_token to this machine's ~/.ray/auth_token "
                "(or point RAY_AUTH_TOKEN_PATH at a copy)",
            )
        return SingaError(
            f"cannot join the Ray cluster at {self.address}: {cause}",
            where="--address",
            help="check that this machine reaches the nodes and they reach "
            "it (ports 6380, 6381 and the worker ports, both ways; see docs/guide/clusters.md) "
            "and Ray's logs in /tmp/ray/session_latest/logs on the head",
        )

    def __exit__(self, *exc) -> None:
        if self.guard is not None:
            self.guard.stop()  # before the runtime ends on purpose
        try:
            if self._owned:
                import ray

                self._owned = False
                tree = ray_tree(self._roots) if self.private else {}
                ray.shutdown()  # the private runtime: kills the processes ray.init started
                if self.private:
                    end_leftovers(tree, self._roots)
        finally:
            if self.reports is not None:
                self.reports.restore()
            try:
                self._token.restore()  # the user's RAY_AUTH_* again (private runtime)
            finally:
                self.signals.restore()

    @staticmethod
    def free_view_settled(nodes: list[Node]) -> bool:
        """:func:`free_view_settled` with the cluster's placement groups (one GCS call);
        False when the table cannot be read."""
        try:
            from ray.util import placement_group_table

            table = placement_group_table()
        except Exception:  # noqa: BLE001 - the GCS did not answer: look again, as before
            return False
        return free_view_settled(nodes, held_by_placement_groups(table))

    @staticmethod
    def nodes() -> list[Node]:
        """The cluster's live nodes."""
        import ray

        try:  # what other jobs leave free on each node (actors, placement groups)
            from ray._private.state import available_resources_per_node

            free = available_resources_per_node()
        except Exception:  # noqa: BLE001 - an older or newer Ray: plan on the totals
            free = {}
        out = []
        for n in ray.nodes():
            if not n.get("Alive"):
                continue
            res = n.get("Resources", {})
            cpus, memory, gpus = res.get("CPU", 0.0), res.get("memory", 0), res.get("GPU", 0.0)
            avail = free.get(n["NodeID"])
            node = Node(n["NodeID"], n["NodeManagerAddress"], cpus, memory, gpus)
            if avail is not None:
                node = Node(
                    node.id, node.address, cpus, memory, gpus,
                    free_cpus=min(cpus, avail.get("CPU", 0.0)),
                    free_memory=min(memory, avail.get("memory", 0.0)),
                    free_gpus=min(gpus, avail.get("GPU", 0.0)),
                )  # fmt: skip
            out.append(node)
        return sorted(out, key=lambda n: (n.address, n.id))


def _quiet_ray_threads(log_path) -> None:
    """An exception ending one of Ray's own driver threads (``ray_listen_error_messages``
    when the GCS goes away, say) goes to the driver's Ray log, not to the user's terminal
    as Python's threading traceback: the head guard reports the loss itself, in one
    located message. Other threads' exceptions are printed as before."""
    import threading
    import traceback

    previous = threading.excepthook
    if getattr(previous, "singa_quiet_ray", False):
        return

    def hook(args) -> None:
        thread = args.thread
        if thread is None or not thread.name.startswith("ray_"):
            previous(args)
            return
        if log_path is None:
            return
        text = "".join(traceback.format_exception(args.exc_type, args.exc_value,
                                                  args.exc_traceback))  # fmt: skip
        try:
            with open(log_path, "a") as fh:
                fh.write(f"Ray's thread {thread.name} ended:\n{text}")
        except OSError:
            pass

    hook.singa_quiet_ray = True
    threading.excepthook = hook
