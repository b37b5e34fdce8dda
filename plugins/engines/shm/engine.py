"""The shared-memory engine: workers and servers in separate OS processes (SINGA 0.3 §5).

The cluster configuration (ClusterProto) decides the layout: ``nworker_groups`` ×
``nworkers_per_group`` workers, ``nserver_groups`` × ``nservers_per_group`` servers,
``nworkers_per_procs`` / ``nservers_per_procs`` of them (threads) per process,
``server_worker_separate``. Processes are started with the "spawn" method. Param values,
gradients, versions and updater state live in ``multiprocessing.shared_memory`` segments;
only small control messages (param id, slice id, step, version) travel on queues. Each
worker runs the same :class:`~singa_core.running.training.TrainingLoop` as the in-process engine;
group 0 worker 0 displays, tests, validates and checkpoints. Synchronous within a worker
group, asynchronous across groups; several server groups synchronise every ``sync_freq``
updates (distributed Hogwild). Parts: :mod:`singa_builtins.engines.shm`.

Chosen automatically when the cluster has more than one worker or server; ``--engine shm``
forces it for 1 worker + 1 server too.
"""

from __future__ import annotations

import inspect

import numpy as np
from singa_builtins.engines.shm.bridge import bridge_pairs
from singa_builtins.engines.shm.layout import ParamLayout
from singa_builtins.engines.shm.topology import build_topology

from singa_core.blas import blas_threads_for
from singa_core.engine import Engine, TrainResult
from singa_core.errors import SingaError
from singa_core.layer import kTrain
from singa_core.netbuilder.net import NeuralNet
from singa_core.resources import usable_cpus
from singa_core.running import checkpoint as ckpt


class SharedMemoryEngine(Engine):
    type_names = ("shm",)
    priority = 5  # below inprocess, which takes 1 worker + 1 server

    @classmethod
    def supports(cls, job) -> str | None:
        # any topology (a bad one is a located error at construction), but a group of
        # several workers needs the net builder's partitions
        if job.cluster.nworkers_per_group > 1 and not hasattr(NeuralNet, "partition_view"):
            return (
                f"the {job.cluster.nworkers_per_group} workers of a group need net partitioning "
                "(NeuralNet.partition_view), which this version does not have"
            )
        return None

    def __init__(self, prepared, reporter) -> None:
        super().__init__(prepared, reporter)
        job = prepared.job
        self.topology = build_topology(job.cluster, prepared.cfg.locate)
        self.full_net = self._full_train_net()
        topo = self.topology
        self.layout = ParamLayout.from_net(
            self.full_net, topo.nservers_per_group, topo.nserver_groups
        )
        updater = prepared.make_updater()
        self.state_names = list(updater.init_state(np.zeros(1, dtype=np.float32)))
        self.bridges = []
        if topo.nworkers_per_group > 1:
            for g in range(topo.nworker_groups):
                self.bridges += bridge_pairs(self.full_net, g, len(self.bridges))

    def _full_train_net(self):
        """The train net every worker builds (partitioned for groups of several workers),
        with the values training starts from."""
        prepared, wpg = self.prepared, self.topology.nworkers_per_group
        if wpg == 1:
            return prepared.nets.get(kTrain) or prepared.build_net(kTrain)
        net = prepared.nets.get(kTrain)
        if net is not None and getattr(net, "num_partitions", 1) == wpg:
            return net  # prepare_job built (and initialised or loaded) the partitioned net
        if "num_partitions" not in inspect.signature(prepared.build_net).parameters:
            raise SingaError(
                f"nworkers_per_group is {wpg}, but this version cannot partition nets yet",
                where=prepared.cfg.locate("cluster.nworkers_per_group"),
                help="use nworkers_per_group: 1 (several worker groups train asynchronously)",
            )
        net = prepared.build_net(kTrain, num_partitions=wpg)
        files = prepared.resume[1] if prepared.resume else list(prepared.job.checkpoint_path)
        if files:
            ckpt.load_param_files(
                net.owner_params,
                files,
                start_step=prepared.start_step,
                reset_version=prepared.job.reset_param_version and not prepared.resume,
            )
        return net

    def blas_threads(self) -> int:
        # num_openblas_threads, else OPENBLAS_NUM_THREADS / MKL_ / OMP_NUM_THREADS, else the
        # cores shared out among the processes
        share = usable_cpus() // len(self.topology.procs)
        return blas_threads_for(self.prepared.job, share)

    def describe(self) -> list[str]:
        topo = self.topology
        lines = [
            f"engine: shm ({len(topo.procs)} processes, spawn; share_memory "
            f"{str(topo.share_memory).lower()}; {topo.nworker_groups} worker group(s) x "
            f"{topo.nworkers_per_group}, {topo.nserver_groups} server group(s) x "
            f"{topo.nservers_per_group}; {self.blas_threads()} BLAS thread(s) per process)"
        ]
        for spec in topo.procs:
            lines.append(f"  {spec.role()}")
        return lines + self.slice_lines()

    def slice_lines(self) -> list[str]:
        """The params, their slices and which server holds which (for --dry-run)."""
        topo, layout = self.topology, self.layout
        lines = []
        lines.append(
            f"params: {len(layout.order)} ({layout.total:,} values) in {len(layout.slices)} "
            f"slice(s), num = lcm({topo.nservers_per_group}, {topo.nserver_groups}) = {layout.num}"
        )
        for sj in range(topo.nservers_per_group):
            parts = []
            count = 0
            for s in layout.slices_of_server(sj):
                info = layout.params[s.param]
                rng = "" if s.size == info.size else f"[{s.start}:{s.start + s.size}]"
                master = f" (master: server group {s.master})" if topo.nserver_groups > 1 else ""
                parts.append(f"slice {s.id} = {info.name}{rng}{master}")
                count += s.size
            where = "every server group" if topo.nserver_groups > 1 else "server group 0"
            lines.append(f"  server {sj} of {where} holds {count:,} values: " + ", ".join(parts))
        if topo.nserver_groups > 1:
            lines.append(f"  server groups synchronise every {topo.sync_freq} update(s) of a slice")
        return lines

    def train(self) -> TrainResult:
        from singa_builtins.engines.shm.launcher import Launcher

        return Launcher(self).run()

    def test(self, steps: int) -> dict[str, float]:
        # evaluation runs one unpartitioned test net: the in-process engine does that
        from singa_builtins.engines.inprocess import InProcessEngine

        return InProcessEngine(self.prepared, self.reporter).test(steps)
