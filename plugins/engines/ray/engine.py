"""The Ray engine: the same job.conf on many machines (SINGA 0.3 §5 on a Ray cluster).

The cluster section means what it means for the ``shm`` engine
(:mod:`singa_builtins.engines.shm.engine`): the same SINGA processes (worker groups, server
groups, ``nworkers_per_procs``, ``nservers_per_procs``, ``server_worker_separate``), the
same slices (:mod:`singa_core.netbuilder.slicing`) on the same servers
(:class:`ParamShard` behind the per-group aggregation), the same worker threads and TrainingLoop.
Each SINGA process is one Ray actor; singa plans the node of each (``--placement
group|spread|pack``, :mod:`~singa_builtins.engines.ray.placement`) and a placement group
reserves it. Between actors of one node gradient slices and fresh values go through shared
memory and pipes (as with shm); between nodes as batched actor calls and object refs: synchronous
inside a group, asynchronous across groups, Hogwild sync between server groups, bridges
between the partitions of a group on different nodes. Reports, metrics and
checkpoints appear on the machine that runs ``singa train``.

Without ``--address`` (or ``RAY_ADDRESS``) a private one-node runtime is started and shut
down; ``--address HOST:PORT`` or ``auto`` joins a cluster made with ``ray start``.
``--max-restarts N`` restarts a job that lost a process or node from its newest checkpoint.
Engine option ``cpus_per_worker`` (``--engine-option cpus_per_worker=0.5``) sets the CPUs a
worker thread asks for (default 1); ``ray_log=terminal`` lets Ray print what it publishes
to drivers (a dead raylet's last log lines) on the terminal instead of
``WORKSPACE/ray-driver.log`` (:mod:`~singa_builtins.engines.ray.driverlog`). Never chosen
automatically: ``--engine ray``. Importing this module does not import Ray. Parts:
:mod:`singa_builtins.engines.ray`.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from singa_builtins.engines.ray.placement import STRATEGIES
from singa_builtins.engines.ray.runtime import PIP_COMMAND, ray_installed
from singa_builtins.engines.shm.engine import SharedMemoryEngine

from singa_core.blas import blas_threads_for
from singa_core.engine import TrainResult
from singa_core.errors import SingaError


@dataclass
class RayOptions:
    address: str | None = None
    placement: str = STRATEGIES[0]
    max_restarts: int = 0
    cpus_per_worker: float = 1.0
    insecure: bool = False  # join a cluster that checks no tokens
    startup_timeout: float = 60.0  # seconds
    ray_log: str = "file"  # Ray's own reports: WORKSPACE/ray-driver.log, or the terminal


def _number(options, name, kind, minimum, where, example=None):
    try:
        value = kind(options[name])
    except ValueError:
        value = None
    if value is not None and kind is float and not math.isfinite(value):
        value = None
    if value is None or value < minimum or (kind is float and value == 0):
        raise SingaError(
            f"{name.replace('_', '-')} is {options[name]!r}; it must be a number "
            f"{'above' if kind is float else 'of at least'} {minimum}",
            where=where,
            help=f"e.g. {where} {example or ('0.5' if kind is float else '1')}",
        )
    return value


def _flag(options, name, where):
    text = str(options[name]).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise SingaError(
        f"{name} is {options[name]!r}; it must be true or false",
        where=where,
        help=f"{where} (or --engine-option {name}=true)",
    )


class RayEngine(SharedMemoryEngine):
    type_names = ("ray",)
    priority = -10  # only when asked for: --engine ray
    option_names = (
        "address",
        "placement",
        "max_restarts",
        "cpus_per_worker",
        "insecure",
        "startup_timeout",
        "ray_log",
    )

    @classmethod
    def unavailable(cls) -> str | None:
        return None if ray_installed() else f"needs Ray: {PIP_COMMAND}"

    @classmethod
    def supports(cls, job) -> str | None:
        if not ray_installed():
            return f"Ray is not installed; install it with: {PIP_COMMAND}"
        return super().supports(job)

    @classmethod
    def cluster_jobs(cls, address: str | None, insecure: bool = False):
        from singa_builtins.engines.ray.clusterjobs import RayClusterJobs

        return RayClusterJobs(address, insecure)

    @classmethod
    def trial_runner(cls, address: str | None, insecure: bool = False):
        from singa_builtins.engines.ray.trials import RayTrials

        return RayTrials(address, insecure)

    @classmethod
    def default_address(cls) -> str | None:
        text = os.environ.get("RAY_ADDRESS") or None
        return None if text == "local" else text

    def __init__(self, prepared, reporter) -> None:
        super().__init__(prepared, reporter)
        self.ray_options = RayOptions()

    def configure(self, options: dict[str, str]) -> None:
        super().configure(options)
        o = RayOptions(address=options.get("address") or None)
        if "placement" in options:
            o.placement = options["placement"].lower()
            if o.placement not in STRATEGIES:
                raise SingaError(
                    f"placement is {options['placement']!r}",
                    where="--placement",
                    help="--placement group (default: each worker group with its servers on "
                    "one node), spread (a process on every node first) or pack (fill nodes "
                    "in order)",
                )
        if "max_restarts" in options:
            o.max_restarts = _number(options, "max_restarts", int, 0, "--max-restarts")
        if "cpus_per_worker" in options:
            o.cpus_per_worker = _number(
                options, "cpus_per_worker", float, 0, "--engine-option cpus_per_worker="
            )
        if "startup_timeout" in options:
            o.startup_timeout = _number(
                options, "startup_timeout", float, 0, "--startup-timeout", "120"
            )
        if "insecure" in options:
            o.insecure = _flag(options, "insecure", "--insecure")
        if "ray_log" in options:
            o.ray_log = str(options["ray_log"]).strip().lower()
            if o.ray_log not in ("file", "terminal"):
                raise SingaError(
                    f"ray-log is {options['ray_log']!r}",
                    where="--engine-option ray_log=",
                    help="ray_log=file (default: what Ray publishes to drivers, such as a dead "
                    "raylet's last log lines, goes to WORKSPACE/ray-driver.log with one line "
                    "here) or ray_log=terminal (Ray prints it here as it comes)",
                )
        self.ray_options = o

    def requests(self) -> list:
        """What each SINGA process asks Ray for (CPUs, memory, GPUs: one per distinct GPU
        device of its workers, the cluster's, not this machine's)."""
        from singa_builtins.engines.ray.placement import process_requests
        from singa_builtins.engines.shm.context import worker_device_specs

        return process_requests(
            self.topology, self.layout, len(self.state_names),
            self.ray_options.cpus_per_worker, worker_device_specs(self.prepared),
        )  # fmt: skip

    def gpu_where(self) -> str:
        """Where the job asks for GPUs: --device, or job.conf's gpu field."""
        if getattr(self.prepared, "device_override", None):
            return "--device"
        return self.prepared.cfg.locate("gpu")

    def device_where(self, j: int) -> str:
        """Where worker ``j``'s device is named: --device, or its entry of job.conf's gpu."""
        if getattr(self.prepared, "device_override", None):
            return "--device"
        return str(self.prepared.cfg.locate(f"gpu[{j}]"))

    def process_blas_threads(self, request) -> int:
        """BLAS threads of one SINGA process: num_openblas_threads, else the driver's
        OPENBLAS_, MKL_ or OMP_NUM_THREADS, else its CPUs."""
        return blas_threads_for(self.prepared.job, int(request.cpus))

    def describe(self) -> list[str]:
        from singa_builtins.engines.ray.dryrun import placement_lines

        topo = self.topology
        head = (
            f"engine: ray ({len(topo.procs)} processes as Ray actors, placement "
            f"{self.ray_options.placement}, {self.ray_options.cpus_per_worker:g} CPU per worker "
            f"thread; {topo.nworker_groups} worker group(s) x {topo.nworkers_per_group}, "
            f"{topo.nserver_groups} server group(s) x {topo.nservers_per_group})"
        )
        return [head, *placement_lines(self, os.getcwd()), *self.slice_lines()]

    def train(self) -> TrainResult:
        from singa_builtins.engines.ray.driver import Driver

        return Driver(self).run()
