"""The in-process engine: one worker group and its parameter server in the calling process.

A group of several workers (``nworkers_per_group`` > 1 with ``nworkers_per_procs`` at least
as large: SINGA's in-memory Sandblaster) runs its partitioned net here too: the worker
drives every partition's layers, the bridges between partitions copy in memory, and the
server sums the replicas' gradients (their loss layers scale by 1/n, see LossLayer).

Workers and the server side share Param memory directly (as SINGA 0.3's in-process stub
passed pointers), but every gradient still goes through ``ParamStub.update`` and the
server's :class:`~singa_core.stub.ParamShard`, so layers and workers behave exactly as they
will under multi-process engines.
"""

from __future__ import annotations

from singa_builtins.engines.graphed_step import GraphedStep

from singa_core.blas import (
    blas_threads_for,
    blas_threads_problem,
    blas_threads_set_by,
    faster_thread_count,
    host_sgemm,
)
from singa_core.capture import prepare_step, step_scope
from singa_core.engine import Engine, TrainResult
from singa_core.errors import SingaError
from singa_core.layer import kTest, kTrain
from singa_core.names import runtime_param_name
from singa_core.resources import usable_cpus
from singa_core.running import checkpoint as ckpt
from singa_core.running.job import updater_type_name
from singa_core.running.thread_trial import trial_times
from singa_core.running.training import TrainingLoop, pop_net_metrics
from singa_core.stub import FoldedUpdate, ParamShard, ParamStub, fold_updates, hand_over


class InProcessStub(ParamStub):
    def __init__(self, shard: ParamShard, params) -> None:
        self.shard = shard
        self.folds: list[FoldedUpdate] = []  # see enable_folds
        self.shares: dict[int, list] = {}
        for p in params:
            self.shares.setdefault(p.owner.id, []).append(p)

    def collect(self, param) -> None:
        # Values are shared with the shard; an update is applied before update() returns,
        # or (a shard batching a device's updates) before anything reads a value again.
        if self.shard.pending:
            self.flush()

    def enable_folds(self) -> int:
        """Let every Param whose server allows it have its update applied inside its
        gradient's GEMM (:func:`fold_updates`); the number of Params that can. Folds act
        only in steps run by :meth:`folding_step`."""
        self.folds = fold_updates(self.shard, [p for ps in self.shares.values() for p in ps])
        return len(self.folds)

    def folding_step(self, step: int, run) -> None:
        """``run()`` (one training step) with the folds armed for ``step``."""
        for f in self.folds:
            f.arm(step)
        try:
            run()
        finally:
            for f in self.folds:
                f.disarm()

    def update(self, step: int, param) -> None:
        version = hand_over(self.shard, step, param)
        if version is not None:
            self._set_version(param.owner.id, version)
        elif self.shard.pending and len(self.shard.pending) == self._learnable():
            self.flush()  # the step's last gradient: every Param in one launch

    def flush(self) -> None:
        for key, version in self.shard.flush().items():
            self._set_version(key, version)

    def replayed(self) -> None:
        """A replayed step updated every Param once (its kernels ran, this Python did
        not): their versions advance as a step's updates advance them."""
        for key, e in self.shard.entries.items():
            e.version += 1
            self._set_version(key, e.version)

    def _learnable(self) -> int:
        n = getattr(self, "_n_learnable", None)
        if n is None:
            n = self._n_learnable = self.shard.learnable_keys()
        return n

    def _set_version(self, key: int, version: int) -> None:
        for q in self.shares[key]:
            q.version = version
            q.refresh()  # a mirror on another device takes the new values


class _TrialStub(InProcessStub):
    """The stub of the thread trial's steps: gradients go nowhere (values, versions and
    updater state stay as they were)."""

    def update(self, step: int, param) -> None:
        pass


class InProcessEngine(Engine):
    type_names = ("inprocess",)
    priority = 10
    #: graphs=on|off: capture a training step's device work once and replay it
    #: (plugins/engines/graphed_step.py; off by default)
    #: fold=on|off: plain SGD's update applied inside each weight gradient's GEMM (on by
    #: default; off writes every gradient to its array first, e.g. to compare)
    option_names = ("graphs", "fold")

    @classmethod
    def supports(cls, job) -> str | None:
        c = job.cluster
        if c.nworker_groups != 1 or c.nserver_groups * c.nservers_per_group != 1:
            return (
                f"it runs 1 worker group and 1 server; the cluster asks for "
                f"{c.nworker_groups} worker group(s) and "
                f"{c.nserver_groups * c.nservers_per_group} server(s)"
            )
        if c.nworkers_per_group > 1 and c.nworkers_per_procs < c.nworkers_per_group:
            return (
                f"it runs the {c.nworkers_per_group} workers of a group in one process only "
                f"when nworkers_per_procs ({c.nworkers_per_procs}) is at least that many"
            )
        return None

    def __init__(self, prepared, reporter) -> None:
        super().__init__(prepared, reporter)
        self.job = prepared.job
        self.nets = prepared.nets or {kTrain: prepared.build_net(kTrain)}
        self.train_net = self.nets[kTrain]
        self.worker = prepared.make_worker()
        self.updater = prepared.make_updater()
        # a GPU's updates wait for the step's last gradient and run in one launch
        self.shard = ParamShard(self.updater, batch_updates=not self._device().is_host)
        self.names = {p.id: runtime_param_name(p.name) for p in self.train_net.owner_params}
        self.threads: int | None = None  # the BLAS threads of this run, once chosen

    def describe(self) -> list[str]:
        n = self.train_net.num_param_values()
        k = self.train_net.num_partitions
        workers = "worker 0" if k == 1 else f"workers 0-{k - 1} (one partition each)"
        threads, why = self._threads_rule()
        count = f"{threads} BLAS thread(s)" if threads else "BLAS threads"
        return [
            f"engine: inprocess (1 process: {workers} of group 0 and server 0 of group 0; "
            f"{count}: {why})",
            f"server 0 holds all {len(self.train_net.owner_params)} params ({n:,} values) unsliced",
            f"host GEMMs: {host_sgemm()}",
        ]

    # -- set-up of parameter values (SINGA's InitNetParams) -------------------------------
    def _init_params(self) -> tuple[int, bool]:
        job, prepared = self.job, self.prepared
        owners = self.train_net.owner_params
        if prepared.resume:
            step, files = prepared.resume
            ckpt.load_param_files(owners, files, start_step=step, reset_version=False)
            state = ckpt.read_state(str(files[0]) + ckpt.STATE_SUFFIX, lazy=True)
            self._check_resume_state(state, files[0])
            self._put_all()
            self.shard.load_state_arrays(self.names, state.arrays)
            ckpt.restore_layer_states(self.nets, state.meta.get("layers", {}))
            return step, True
        # a new job: values are initialised, or loaded from checkpoint_path, by prepare_job
        self._put_all()
        return int(job.step), False

    def _check_resume_state(self, state, path) -> None:
        saved = state.meta.get("updater")
        current = updater_type_name(self.job.updater)
        if saved and saved != current:
            raise SingaError(
                f"the checkpoint was trained with updater {saved} but job.conf now says {current}",
                where=str(path),
                help="resume with the job.conf that wrote the checkpoint, or start a new "
                "job with checkpoint_path to fine-tune",
            )

    def _put_all(self) -> None:
        # (num_replicas stays 1: replicas' loss layers already scale by 1/n)
        self.shard.put_net(self.train_net)
        for p in self.train_net.params:  # replicas on another device: the initial values
            p.refresh()

    def _write_checkpoint(self, step: int, evaluated=()) -> str:
        records = [
            ckpt.ParamRecord(self.names[p.id], p.version, p.value)
            for p in self.train_net.owner_params
        ]
        state = ckpt.TrainingState(
            step=step,
            meta={
                "seed": self.prepared.seed,
                "updater": updater_type_name(self.job.updater),
                "plugins": [f"{d} {v}" for d, v in self.prepared.host.distributions()],
                "layers": ckpt.layer_states(self.nets),
                "evaluated": list(evaluated),
                "blas_threads": self.threads,
            },
            arrays=self.shard.state_arrays(self.names),
        )
        return str(
            ckpt.write_checkpoint(
                self.prepared.workspace, step, 0, records, state, keep=self.job.keep_checkpoints
            )
        )

    def configure(self, options: dict[str, str]) -> None:
        super().configure(options)
        graphs = options.get("graphs", "off")
        if graphs not in ("on", "off"):
            raise SingaError(
                f"--engine-option graphs is {graphs!r}",
                where="--engine-option",
                help="graphs=on replays each training step's device work, graphs=off "
                "(the default) runs it eagerly",
            )
        fold = options.get("fold", "on")
        if fold not in ("on", "off"):
            raise SingaError(
                f"--engine-option fold is {fold!r}",
                where="--engine-option",
                help="fold=on (the default) applies plain SGD's update inside each weight "
                "gradient's GEMM, fold=off writes every gradient to its array first",
            )
        device = self._device()
        if graphs == "on" and not (device.kind == "standin" and device.code == "cuda"):
            raise SingaError(
                f"graphs=on replays the kernels' CUDA code; the job computes on {device}"
                + (" (capturing on a GPU is not built yet)" if device.kind == "cuda" else ""),
                where="--engine-option",
                help="run it with --device standin:cuda (the CUDA code emulated on the CPU), "
                "or leave graphs off",
            )

    def _loop(self) -> TrainingLoop:
        stub = InProcessStub(self.shard, self.train_net.params)
        graphs = self.options.get("graphs") == "on"
        runner = GraphedStep(self.worker, self.train_net, stub, self.reporter) if graphs else None
        if not graphs and self.options.get("fold", "on") == "on" and stub.enable_folds():
            worker, net = self.worker, self.train_net

            def runner(step: int, used) -> None:
                if used is not stub:  # a stub that looks at the gradients: none folded
                    worker.train_one_batch(step, net, used)
                else:
                    stub.folding_step(step, lambda: worker.train_one_batch(step, net, stub))
                stub.flush()

        return TrainingLoop(
            self.job,
            worker=self.worker,
            stub=stub,
            train_net=self.train_net,
            nets=self.nets,
            checkpoint=self._write_checkpoint,
            reporter=self.reporter,
            lr=self.updater.lr,
            step_runner=runner,
        )

    def _threads_rule(self) -> tuple[int | None, str]:
        """(BLAS threads, why), or (None, why) when a trial on the first steps decides:
        SINGA's num_openblas_threads when set, else the user's OPENBLAS_, MKL_ or
        OMP_NUM_THREADS; else a resumed run's recorded count (its results depend on it);
        else, with one usable CPU (affinity mask, cgroup quota), 1."""
        cpus = usable_cpus()
        source = blas_threads_set_by(self.job)
        if source is not None:
            return blas_threads_for(self.job, cpus), f"set by {source}"
        recorded = self.prepared.resume_meta.get("blas_threads") if self.prepared.resume else None
        if recorded:
            return int(recorded), "automatic, recorded in the checkpoint this run resumes"
        if cpus == 1:
            return 1, "automatic: 1 CPU usable"
        return None, (
            f"automatic: 1 or {cpus}, whichever runs the first trial steps faster here and now "
            f"({cpus} only when every trial step is at least 10% faster; the trial's steps "
            "are then undone)"
        )

    def _thread_trial(self, step: int) -> tuple[int, str]:
        """Time training steps at 1 and at every usable CPU, alternating, and keep the faster
        (:func:`faster_thread_count`). The steps change nothing: their gradients go nowhere
        and the layers' cursors, random states, metrics and the values of the Params they
        write themselves (non-learnable) are rewound afterwards, so the
        run's results depend only on the count kept (recorded in its checkpoints)."""
        cpus, net = usable_cpus(), self.train_net
        before = ckpt.layer_states({kTrain: net})
        # Params that layers write themselves (e.g. batch-norm running statistics)
        written = [(p, p.value.copy()) for p in net.owner_params if not p.learnable]
        stub = _TrialStub(self.shard, net.params)
        try:  # bounded: pairs, seconds, and a step over its bound ends it (thread_trial.py)
            times, ended = trial_times(lambda: self.worker.train_one_batch(step, net, stub), cpus)
        finally:
            ckpt.restore_layer_states({kTrain: net}, before)
            for p, value in written:
                p.value[...] = value
            pop_net_metrics(net)
        n, why = faster_thread_count(times)
        return n, f"automatic: {why}{ended}"

    def _pin_threads(self, step: int | None = None) -> None:
        if self.threads is None:
            n, why = self._threads_rule()
            if n is None and self._device().kind == "cuda":  # the host only feeds the GPU
                n, why = 1, "automatic: the layers compute on the GPU"
            if n is None:
                n, why = (
                    self._thread_trial(step)
                    if step is not None and step < self.job.train_steps
                    else (usable_cpus(), "automatic: no training steps to time")
                )
            self.threads = n
            if blas_threads_set_by(self.job) is None:
                self.reporter.note(f"BLAS threads: {n} ({why})")
            if not host_sgemm().startswith("openblas"):  # numpy's own BLAS goes unsaid
                self.reporter.note(f"sgemm: {host_sgemm()}")
        problem = blas_threads_problem(self.threads)
        if problem:
            self.reporter.note(problem)

    def _device(self):
        from singa_core.device import CPU

        return self.prepared.devices[0] if self.prepared.devices else CPU

    def train(self) -> TrainResult:
        start, resumed = self._init_params()
        self._pin_threads(start)
        loop = self._loop()
        done = self.prepared.resume_meta.get("evaluated", ()) if resumed else ()
        with self._device().activate():  # the GPU of worker 0 is current in this thread
            step, last, interrupted = loop.run(start, resumed=resumed, done_evaluations=done)
        return TrainResult(step, last, loop.last_metrics, interrupted, loop.stop_signal)

    def test(self, steps: int) -> dict[str, float]:
        self._pin_threads()
        step, _ = self._init_params()
        if kTest not in self.nets:
            net = self.prepared.build_net(kTest, num_partitions=1)
            net.share_params_from(self.train_net, self.prepared.cfg.locate)
            self.nets[kTest] = net
        with self._device().activate(), step_scope():
            prepare_step(step)  # the layers' random draws: those of that step's evaluation
            return self._loop().evaluate(kTest, steps)
