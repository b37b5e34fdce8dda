"""singa from Python: drive a job.conf from a notebook or a sweep script.

::

    from singa_core import Job

    job = Job.from_file("examples/mnist/job.conf", overrides={"train_steps": 200}, seed=1)
    job.on("test", lambda ev: print(ev.step, ev.metrics["accuracy"]))
    result = job.train()        # RunResult: final step, checkpoint, metrics, wall-time split
    print(job.test(steps=100).metrics)
    w = job.net.params["w1"]    # numpy arrays of the trained Params

The ``singa train`` and ``singa test`` commands are built on this module, so a job behaves
the same from Python as from the shell: the same checks before step 0, the same output
(SINGA-style lines on stdout, notes on stderr, ``WORKSPACE/metrics.jsonl``, TensorBoard
event files), the same checkpoints. Mistakes raise :class:`~singa_core.contracts.errors.SingaError`
(its ``where`` names FILE:LINE:COL); nothing here calls ``sys.exit``. Ctrl-C during
:meth:`Job.train` finishes the current step, writes a checkpoint and returns a result with
``interrupted=True``.

Callbacks (:meth:`Job.on`) receive an :class:`Event` on ``"display"`` (the training metrics
every ``disp_freq`` steps), ``"validation"``, ``"test"`` and ``"checkpoint"``; an exception
a callback raises stops training and propagates. Under a multi-process engine they run in
this process, as the display worker's reports arrive.
"""

from __future__ import annotations

import sys
import time
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from singa_core.contracts.errors import SingaError, SingaWarning
from singa_core.running.reporting import Reporter

EVENTS = ("display", "validation", "test", "checkpoint")
_PHASE_EVENT = {"Train": "display", "Validation": "validation", "Test": "test"}


@dataclass
class Event:
    """What a callback receives: ``kind`` (one of :data:`EVENTS`), the step, the metrics
    (empty for checkpoints), the checkpoint file and the seconds the evaluation or
    checkpoint took."""

    kind: str
    step: int
    metrics: dict[str, float] = field(default_factory=dict)
    checkpoint: str | None = None
    seconds: float | None = None


@dataclass
class TimeSplit:
    """Where a run's wall time went, in seconds. ``setup``: reading job.conf, checks, nets,
    engine start; ``training``: the training steps (``steps`` of them); ``evaluation``:
    validation and test passes; ``checkpoints``: writing checkpoints; ``other``: the rest
    (metrics lines, TensorBoard, engine coordination)."""

    wall: float = 0.0
    setup: float = 0.0
    training: float = 0.0
    steps: int = 0
    evaluation: float = 0.0
    checkpoints: float = 0.0

    @property
    def other(self) -> float:
        return max(self.wall - self.setup - self.training - self.evaluation - self.checkpoints, 0.0)

    @property
    def ms_per_step(self) -> float:
        return 1000 * self.training / max(self.steps, 1)

    def describe(self) -> str:
        """E.g. ``47.1 s: set-up 1.2 s, training 16.6 s (300 steps, 55.3 ms/step), ...``."""
        return (
            f"{self.wall:.1f} s: set-up {self.setup:.1f} s, training {self.training:.1f} s "
            f"({self.steps} steps, {self.ms_per_step:.1f} ms/step), evaluation "
            f"{self.evaluation:.1f} s, checkpoints {self.checkpoints:.1f} s, other "
            f"{self.other:.1f} s"
        )


@dataclass
class RunResult:
    """What :meth:`Job.train` returns.

    ``metrics``: the last metrics of each phase (``"train"``, ``"validation"``, ``"test"``);
    ``history``: every (step, metrics) of each phase, in order; ``checkpoint``: the last
    checkpoint file written (None if the job writes none); ``interrupted``: stopped early by
    Ctrl-C/SIGTERM (``stop_signal``); ``trained``: False when a resumed job had nothing left
    to train."""

    final_step: int
    checkpoint: str | None
    interrupted: bool
    metrics: dict[str, dict[str, float]]
    history: dict[str, list[tuple[int, dict[str, float]]]]
    times: TimeSplit
    seed: int
    workspace: Path
    stop_signal: int | None = None
    trained: bool = True

    def summary(self) -> str:
        """The line ``singa train`` ends with."""
        if self.interrupted:
            return (
                f"interrupted at step {self.final_step} after {self.times.describe()}; "
                f"checkpoint {self.checkpoint} written; continue with --resume"
            )
        return (
            f"finished at step {self.final_step} in {self.times.describe()}; "
            + "".join(f"{text}; " for text in self.final_metrics_text())
            + f"checkpoint: {self.checkpoint}"
        )

    def final_metrics_text(self) -> list[str]:
        """``"test accuracy = 0.894, loss = 0.36"`` for each evaluation logged at the final
        step (validation first)."""
        from singa_core.running.reporting import format_metrics

        out = []
        for phase in ("validation", "test"):
            rows = [m for s, m in self.history.get(phase, []) if s == self.final_step]
            if rows and rows[-1]:
                out.append(f"{phase} {format_metrics(rows[-1])}")
        return out


@dataclass
class TestResult:
    """What :meth:`Job.test` returns: the test net's metrics over ``steps`` mini-batches of
    the Params in ``checkpoints``."""

    __test__ = False  # not a pytest class

    metrics: dict[str, float]
    steps: int
    checkpoints: list[str]
    #: which checkpoint(s) were tested: path, step, when and by which run written
    #: (:class:`singa_core.running.checkpoint.CheckpointInfo`), and notes about them
    checkpoint_info: list = field(default_factory=list)
    checkpoint_notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        from singa_core.running.reporting import format_metrics

        shown = (
            format_metrics(self.metrics)
            if self.metrics
            else "done (the test net reports no metrics)"
        )
        return f"Test ({self.steps} batches, {', '.join(self.checkpoints)}): {shown}"


@dataclass
class LayerView:
    """One layer of a built net: ``params`` maps each Param's name to its values (the live
    numpy array the layer computes with)."""

    name: str
    type: str
    sources: list[str]
    shape: tuple
    params: dict

    def __repr__(self) -> str:
        shape = "x".join(map(str, self.shape)) if self.shape else "-"
        return f"<{self.name} {self.type} out {shape} params {list(self.params)}>"


class NetView:
    """A built net (the training phase's, unless another is asked for): its layers in
    order, ``net["fc1"]`` by name, and ``params`` (every Param the net owns, name -> numpy
    array)."""

    def __init__(self, net) -> None:
        self._net = net
        self.layers: list[LayerView] = []
        for layer, (name, typ, srcs, shape, _n) in zip(net.layers, net.summary(), strict=True):
            params = {p.name: p.value for p in layer.params}
            self.layers.append(LayerView(name, typ, list(srcs), tuple(shape or ()), params))

    @property
    def params(self) -> dict:
        return {p.name: p.value for p in self._net.owner_params}

    def __getitem__(self, name: str) -> LayerView:
        for layer in self.layers:
            if layer.name == name:
                return layer
        raise KeyError(name)

    def __iter__(self):
        return iter(self.layers)

    def __len__(self) -> int:
        return len(self.layers)

    def __repr__(self) -> str:
        return "NetView(\n" + "".join(f"  {layer!r}\n" for layer in self.layers) + ")"


class _CallbackReporter(Reporter):
    """The CLI's Reporter, plus the Job's callbacks and the run's history."""

    def __init__(self, callbacks: dict[str, list[Callable]], **kwargs) -> None:
        super().__init__(**kwargs)
        self.callbacks = callbacks
        self.history: dict[str, list[tuple[int, dict[str, float]]]] = {}

    def _emit(self, event: Event) -> None:
        for fn in self.callbacks.get(event.kind, ()):
            fn(event)

    def metrics(self, phase: str, step: int, metrics: dict[str, float]) -> None:
        super().metrics(phase, step, metrics)
        self.history.setdefault(phase.lower(), []).append((step, dict(metrics)))
        self._emit(Event(_PHASE_EVENT.get(phase, phase.lower()), step, dict(metrics)))

    def checkpointed(self, step: int, path, seconds: float) -> None:
        super().checkpointed(step, path, seconds)
        self._emit(Event("checkpoint", step, {}, path, seconds))


def _cluster_devices(cfg, override: str | None):
    """(the ``--device`` this machine prepares the job with, the workers' device specs on
    the cluster or None) for an engine whose workers run on other machines (Ray): a GPU
    worker's device is checked against the cluster's nodes (the engine asks Ray for it),
    not opened here; this machine builds its nets on the CPU (the same Params and layout)."""
    from singa_core.device import parse_device, worker_device_specs

    n = max(int(cfg.job.cluster.nworkers_per_group), 1)
    specs = worker_device_specs(list(cfg.job.gpu), n, override)
    out, cuda = [], False
    for i, spec in enumerate(specs):
        where = "--device" if override is not None else cfg.locate(f"gpu[{i}]")
        kind, index = parse_device(spec, where) if spec != "cpu" else ("cpu", -1)
        cuda = cuda or kind == "cuda"
        out.append(f"cuda:{index}" if kind == "cuda" else spec)
    if not cuda:
        return override, None
    return ",".join("cpu" if x.startswith("cuda") else x for x in out), out


def select_engine(host, job, name: str | None):
    """The engine class to run ``job``: the one named, or the highest-priority installed
    engine that supports its cluster configuration."""
    reg = host.registry("engine")
    if name:
        try:
            cls = host.get("engine", name)
        except SingaError as err:  # the name came from --engine (Job(engine=...))
            raise err.located("--engine") from None
        reason = cls.supports(job)
        if reason:
            raise SingaError(
                f"engine '{name}' cannot run this job: {reason}",
                where="--engine",
                help="choose another --engine (see `singa list-plugins`)",
            )
        return cls
    reasons = []
    for entry in sorted(reg.entries.values(), key=lambda e: -e.obj.priority):
        if entry.alias_of:
            continue
        reason = entry.obj.supports(job)
        if reason is None:
            return entry.obj
        reasons.append(f"{entry.name}: {reason}")
    raise SingaError(
        "no installed engine can run this cluster configuration",
        notes=reasons,
        help="adjust `cluster { ... }` or install an engine plugin that supports it",
    )


def override_list(overrides: Mapping[str, object] | Iterable[str] | None) -> list[str]:
    """``{"train_steps": 200}`` (or ``["train_steps=200"]``) as ``-o`` texts."""
    if overrides is None:
        return []
    if isinstance(overrides, Mapping):
        out = []
        for key, value in overrides.items():
            if isinstance(value, bool):
                value = "true" if value else "false"
            out.append(f"{key}={value}")
        return out
    if isinstance(overrides, str):
        return [overrides]
    return [str(o) for o in overrides]


@dataclass
class DryRun:
    """A job checked and set up, not run: what ``singa train --dry-run`` prints from."""

    prepared: object  # singa_core.running.job.PreparedJob
    engine: object  # the configured Engine


class Job:
    """A job.conf made ready to run from Python (see the module docstring).

    Use :meth:`from_file`. Options mirror ``singa train``'s: ``overrides`` (``-o``, a dict
    or a list of ``FIELD=VALUE``), ``seed``, ``workspace``, ``engine`` and
    ``engine_options`` (``--engine-option``; also address/placement/max_restarts),
    ``device`` (``--device``: ``"cpu"``, ``"cuda"``, ``"cuda:N"``; default: job.conf's
    ``gpu`` field, SINGA 0.3's meaning), ``quiet`` (no metric lines),
    ``tensorboard``/``histograms``, ``out``/``err`` (default:
    sys.stdout / sys.stderr at the time of the call), ``live`` (the progress line; default
    when stderr is a terminal).
    """

    def __init__(
        self,
        cfg,
        host,
        *,
        seed: int | None = None,
        workspace: str | Path | None = None,
        engine: str | None = None,
        engine_options: Mapping[str, object] | None = None,
        quiet: bool = False,
        tensorboard: bool = True,
        histograms: bool = False,
        out=None,
        err=None,
        live: bool | None = None,
        device: str | None = None,
    ) -> None:
        self.cfg = cfg
        self.host = host
        self.seed = seed
        self.device = device  # --device: cpu, cuda, cuda:N, standin; None: job.conf's gpu
        self.workspace_override = str(workspace) if workspace is not None else None
        self.engine_name = engine
        self.engine_options = {
            k: str(v) for k, v in (engine_options or {}).items() if v is not None
        }
        self.quiet = quiet
        self.tensorboard = tensorboard
        self.histograms = histograms
        self._out, self._err, self.live = out, err, live
        self.callbacks: dict[str, list[Callable]] = {k: [] for k in EVENTS}
        self._prepared = None
        self._prepared_key = None
        self._trained = False

    # -- construction ------------------------------------------------------------------
    @classmethod
    def from_file(
        cls,
        path: str | Path,
        overrides: Mapping[str, object] | Iterable[str] | None = None,
        **options,
    ) -> Job:
        """Read ``path`` (a job.conf), apply ``overrides`` (``{"train_steps": 200}``, or
        ``["updater.learning_rate.base_lr=0.01"]``); a mistake raises SingaError with its
        location. ``options``: see :class:`Job`."""
        from singa_core.jobconf.parse import load_job

        job = cls(None, None, **options)
        job.host = job._load_host()
        job.cfg = load_job(path, override_list(overrides))
        return job

    def _load_host(self):
        from singa_core.plugin_host.host import get_host

        host = get_host()
        for failure in host.failures:
            print(failure.warning(), file=self.err)
        return host

    # -- properties --------------------------------------------------------------------
    @property
    def out(self):
        return self._out or sys.stdout

    @property
    def err(self):
        return self._err or sys.stderr

    @property
    def config(self):
        """The JobProto (after overrides); change it before :meth:`train` if you like."""
        return self.cfg.job

    @property
    def name(self) -> str:
        return self.cfg.job.name or Path(self.cfg.path).stem

    @property
    def workspace(self) -> Path:
        j = self.cfg.job
        ws = self.workspace_override or (
            j.cluster.workspace if j.cluster.HasField("workspace") else ""
        )
        return Path(ws)

    @property
    def net(self) -> NetView:
        """The training net: layers and their Params as numpy arrays (initialised before
        :meth:`train`, trained after it)."""
        from singa_core.contracts.layer import kTrain

        # the nets train() ran (a resumed run prepares its own), else fresh ones
        prepared = self._prepared if self._prepared is not None else self.prepare()
        return NetView(prepared.nets[kTrain])

    def on(self, event: str, fn: Callable[[Event], object] | None = None):
        """Call ``fn(Event)`` on ``event`` ("display", "validation", "test", "checkpoint");
        usable as a decorator: ``@job.on("test")``."""
        if event not in EVENTS:
            raise SingaError(
                f"no event {event!r}",
                where="Job.on",
                help=f"the events: {', '.join(EVENTS)}",
            )
        if fn is None:
            return lambda f: self.on(event, f)
        self.callbacks[event].append(fn)
        return fn

    # -- checking and setting up -------------------------------------------------------
    def prepare(self, *, resume: bool = False, resume_from: int | None = None):
        """Check everything and build the nets (a :class:`singa_core.running.job.PreparedJob`);
        done by :meth:`train` and :attr:`net` when needed."""
        key = (resume, resume_from)
        if self._prepared is not None and self._prepared_key == key:
            return self._prepared
        from singa_core.running.job import prepare_job

        device, remote = self.device, None
        if self.engine_name == "ray":  # the workers' GPUs are the cluster's
            device, remote = _cluster_devices(self.cfg, self.device)
        prepared = prepare_job(
            self.cfg,
            self.host,
            resume=resume,
            resume_from=resume_from,
            seed=self.seed,
            workspace=self.workspace_override,
            device=device,
        )
        prepared.device_override = self.device
        if remote is not None:
            prepared.remote_device_specs = remote
        for line in prepared.notices.values():
            print(line, file=self.err)
        self._prepared, self._prepared_key = prepared, key
        return prepared

    def _reporter(self, metrics_path: Path | None):
        board = None
        if metrics_path is not None and self.tensorboard:
            from singa_core.running.tensorboard import TensorBoardLog

            board = TensorBoardLog.create(
                metrics_path.parent / "tensorboard", histograms=self.histograms, err=self.err
            )
        return _CallbackReporter(
            self.callbacks,
            out=self.out,
            err=self.err,
            metrics_path=metrics_path,
            live=self.live,
            quiet=self.quiet,
            tensorboard=board,
        )

    def _engine(self, prepared, reporter):
        engine_cls = select_engine(prepared.host, prepared.job, self.engine_name)
        eng = engine_cls(prepared, reporter)
        eng.configure(dict(self.engine_options))
        return eng

    def dry_run(self) -> DryRun:
        """Check everything, build the nets and configure the engine; train nothing."""
        prepared = self.prepare()
        return DryRun(prepared, self._engine(prepared, self._reporter(None)))

    # -- training ----------------------------------------------------------------------
    def train(self, *, resume: bool = False, resume_from: int | None = None) -> RunResult:
        """Train the job (``resume``: from the newest checkpoint of the workspace;
        ``resume_from``: from its checkpoint of that step). Once per Job."""
        if self._trained:
            raise SingaError(
                "this Job has trained already",
                where=self.cfg.path,
                help="make a new Job (Job.from_file) for another run, or pass resume=True "
                "to a new Job to continue this one",
            )
        t0 = time.perf_counter()
        # one run per workspace: locked before anything is read or cleaned up there (after
        # the checks when the workspace does not exist yet: prepare_job reports a bad path)
        lock = self._lock_workspace(existing_only=True)
        try:
            prepared = self.prepare(resume=resume, resume_from=resume_from)
            self._trained = True
            if lock is None:
                lock = self._lock_workspace(existing_only=False)
            return self._train_locked(prepared, t0)
        finally:
            if lock is not None:
                lock.release()

    def _lock_workspace(self, *, existing_only: bool):
        """The workspace's :class:`~singa_core.running.workspace.WorkspaceLock`, held;
        None when the workspace path is not usable yet (prepare_job names the problem) or,
        with ``existing_only``, does not exist yet."""
        from singa_core.running.paths import bad_path_text, writable_folder_problem
        from singa_core.running.workspace import WorkspaceLock

        ws = self.workspace
        named = self.workspace_override or self.cfg.job.cluster.HasField("workspace")
        text = str(ws) if named else ""
        if not text or bad_path_text(text) or writable_folder_problem(text):
            return None
        if existing_only and not ws.is_dir():
            return None
        lock = WorkspaceLock(ws).acquire(" ".join(["singa", *sys.argv[1:]])[:300])
        if lock.note:
            print(lock.note, file=self.err)
        return lock

    def _train_locked(self, prepared, t0: float) -> RunResult:
        reporter = self._reporter(prepared.workspace / "metrics.jsonl")
        eng = self._engine(prepared, reporter)
        if not self._before_training(prepared):
            self._cut_torn_metrics_line(prepared)  # a resume with nothing left repairs it too
            return RunResult(
                final_step=prepared.start_step,
                checkpoint=str(prepared.resume[1][0]) if prepared.resume else None,
                interrupted=False,
                metrics={},
                history={},
                times=TimeSplit(wall=time.perf_counter() - t0),
                seed=prepared.seed,
                workspace=prepared.workspace,
                trained=False,
            )
        self._announce(prepared, eng)
        setup = time.perf_counter() - t0
        try:
            result = eng.train()
        except SingaError as err:
            if getattr(err, "exit_code", None) == 3:  # a NaN/inf stopped training
                self._non_finite_stop(err, prepared, reporter)
            elif err.message.startswith("out of memory"):
                self._name_newest_checkpoint(err, prepared)
            raise
        self._sync_net(prepared, eng)
        times = TimeSplit(
            wall=time.perf_counter() - t0,
            setup=setup,
            training=reporter.train_seconds,
            steps=reporter.train_steps_timed,
            evaluation=reporter.evaluation_seconds,
            checkpoints=reporter.checkpoint_seconds,
        )
        return RunResult(
            final_step=result.final_step,
            checkpoint=result.checkpoint,
            interrupted=result.interrupted,
            metrics=dict(result.metrics),
            history=reporter.history,
            times=times,
            seed=prepared.seed,
            workspace=prepared.workspace,
            stop_signal=result.stop_signal,
        )

    def _before_training(self, prepared) -> bool:
        """Housekeeping before a run, under the workspace lock: remove the temp files killed
        runs left behind; for a new run, move an earlier run's checkpoints aside; for a
        resumed run, drop the metrics.jsonl records logged after its checkpoint. False if a
        resumed run has nothing left to train (the note says why)."""
        from singa_core.running.checkpoint import (
            checkpoint_dir,
            latest_checkpoint,
            remove_stale_files,
        )
        from singa_core.running.reporting import rewind_metrics
        from singa_core.running.workspace import move_aside_old_checkpoints, remap_into

        stale = remove_stale_files(prepared.workspace)
        if stale:
            names = ", ".join(f.name for f in stale[:5]) + (" ..." if len(stale) > 5 else "")
            print(
                f"note: removed {len(stale)} temporary file(s) left in {prepared.workspace} "
                f"by an earlier interrupted run: {names}",
                file=self.err,
            )
        if not prepared.resume:
            # a new run never mixes its checkpoints with an earlier run's: they move aside
            old = latest_checkpoint(prepared.workspace)
            if old is not None:
                folder = checkpoint_dir(prepared.workspace)
                moved = move_aside_old_checkpoints(prepared.workspace)
                if moved is not None:
                    paths = prepared.job.checkpoint_path
                    mapped = [remap_into(p, folder, moved) for p in paths]
                    del paths[:]
                    paths.extend(mapped)
                    print(
                        f"note: {folder} had an earlier run's checkpoints (up to step "
                        f"{old[0]}); moved them to {moved}: `--checkpoint "
                        f"{moved / old[1][0].name}` picks that model for singa predict, test "
                        "and export (or move the folder back and continue that run with "
                        "--resume)",
                        file=self.err,
                    )
            return True
        step, total = prepared.start_step, prepared.job.train_steps
        if step >= total:
            print(
                f"note: the checkpoint to resume from is step {step}, at or past "
                f"train_steps ({total}): nothing to train; raise train_steps (e.g. -o "
                f"train_steps={step + max(total, 1)}) to continue, or use --resume-from STEP "
                "for an earlier one",
                file=self.err,
            )
            return False
        rewind_metrics(
            prepared.workspace / "metrics.jsonl", step, prepared.resume_meta.get("evaluated", ())
        )
        return True

    def _cut_torn_metrics_line(self, prepared) -> None:
        from singa_core.running.reporting import cut_torn_line

        path = prepared.workspace / "metrics.jsonl"
        try:
            torn = cut_torn_line(path) if path.is_file() else 0
        except OSError:
            return  # a run with nothing to train reports nothing about a file it cannot fix
        if torn:
            print(
                f"note: cut a torn last line ({torn} bytes) from {path}, left by a run that "
                "stopped while writing it",
                file=self.err,
            )

    def _announce(self, prepared, eng) -> None:
        from singa_core.contracts.version import __version__

        plugins = ", ".join(f"{d}-{v}" for d, v in prepared.host.distributions())
        start = f"resuming at step {prepared.start_step}" if prepared.resume else "starting"
        print(
            f"singa {__version__} | job '{self.name}' {start} | seed {prepared.seed} | "
            f"engine {type(eng).type_names[0]} | plugins: {plugins}",
            file=self.err,
        )
        for line in prepared.device_lines():
            if any(d.kind != "cpu" for d in prepared.devices):
                print(line, file=self.err)

    @staticmethod
    def _newest_checkpoint_note(prepared, good: str) -> tuple[str | None, str]:
        """(the checkpoint ``--resume`` would continue from, a note about it) after training
        stopped: called intact only when it was verified against its manifest; one without
        a manifest (checked for structure only) is named as not verifiable, never intact."""
        from singa_core.running.checkpoint import choose_checkpoint

        with warnings.catch_warnings():  # the note says it; no second warning line
            warnings.simplefilter("ignore", SingaWarning)
            chosen = choose_checkpoint(prepared.workspace, resume=True)
        if chosen is None:
            raise SingaError(
                "no checkpoint", help="train with checkpoint_freq > 0 to save along the way"
            )
        named = f"{chosen.files[0]} (step {chosen.step})"
        resumed = prepared.resume is not None and prepared.resume[0] == chosen.step
        if not chosen.verified:
            note = (
                f"the newest checkpoint is {named}; it has no manifest, so it cannot be "
                "verified (checked for structure only): it may itself be damaged"
            )
            if resumed:
                note += "; this run resumed from it"
            return named, note + "; check it before continuing with `singa train --resume`"
        note = f"the newest {good}checkpoint is {named}; it is intact (its manifest verified it)"
        if resumed:
            return named, note + (
                "; this run resumed from it and stopped before writing another: fix the "
                "cause first, or `singa train --resume` stops the same way"
            )
        return named, note + ": fix the cause and continue with `singa train --resume`"

    @classmethod
    def _name_newest_checkpoint(cls, err, prepared) -> None:
        """Add the newest checkpoint (training stopped before writing another) to an error
        that stopped training: intact only when verified."""
        try:
            err.notes.append(cls._newest_checkpoint_note(prepared, "")[1])
        except SingaError:
            err.notes.append("no checkpoint was written before it")

    @classmethod
    def _non_finite_stop(cls, err, prepared, reporter) -> None:
        """A NaN/inf stopped training (exit 3): name the newest checkpoint, log it."""
        try:
            good, note = cls._newest_checkpoint_note(prepared, "good ")
            err.notes.append(note)
        except SingaError:
            good = None
            err.notes.append("no good checkpoint was written (set checkpoint_freq to save some)")
        reporter.event("non_finite", step=err.step, error=err.message, checkpoint=good)

    @staticmethod
    def _sync_net(prepared, eng) -> None:
        """After training in other processes, load the final checkpoint into the nets
        :attr:`net` shows (the in-process engine trains them directly)."""
        from singa_core.contracts.layer import kTrain
        from singa_core.running.checkpoint import latest_checkpoint, load_param_files

        train = prepared.nets.get(kTrain)
        if train is None or getattr(eng, "train_net", None) is train:
            return
        found = latest_checkpoint(prepared.workspace)
        if found is not None:
            load_param_files(train.owner_params, found[1], start_step=found[0], reset_version=False)

    # -- using the trained model ---------------------------------------------------------
    def model(self, checkpoint: str | Path | None = None, **options):
        """The trained model (:class:`singa_core.inference.model.Model`): this job's deploy
        net with the Params of ``checkpoint`` (a checkpoint file, its folder or a workspace;
        default: the newest checkpoint of the workspace, else job.conf's checkpoint_path),
        verified as every load is. Of the training data only the first 256 records are
        read, when the store is there (``trained_range``, the range of values the model was
        trained on, for :meth:`Model.predict`'s warning). Which checkpoint it uses (path,
        step, when and by which run written) is its ``checkpoint`` attribute
        (:class:`~singa_core.running.checkpoint.CheckpointInfo`); ``checkpoint_notes`` names
        a longer run's checkpoints moved aside in the workspace."""
        from singa_core.inference.model import Model

        return Model.load(
            self.cfg,
            self.host,
            checkpoint=checkpoint,
            workspace=self.workspace_override,
            **options,
        )

    def deploy_plan(self):
        """How this job's deploy net is made (:class:`singa_core.netbuilder.deploy.DeployPlan`)."""
        from singa_core.netbuilder.deploy import deploy_job

        return deploy_job(self.cfg.job, self.host.get, self.cfg.locate)

    # -- testing -----------------------------------------------------------------------
    def _choose_test_threads(self, prepared) -> None:
        """BLAS threads for a test pass as `singa train` chooses them: timed (the worker's
        test passes of the test net at 1 and at every CPU), unless job.conf or the environment sets
        them; the engine then runs with the count chosen (as num_openblas_threads)."""
        from singa_core.contracts.layer import kTest
        from singa_core.running.thread_trial import choose_for_net, needs_choice

        net = prepared.nets.get(kTest) if hasattr(prepared, "nets") else None
        if net is None or not needs_choice(prepared.job):
            return
        n, why = choose_for_net(net, kTest, worker=prepared.make_worker())
        prepared.job.num_openblas_threads = n
        print(f"BLAS threads: {n} ({why})", file=self.err)

    def test(self, steps: int | None = None, checkpoints: Iterable[str | Path] | None = None):
        """Evaluate the test net over ``steps`` mini-batches (default: test_steps) with the
        Params of ``checkpoints`` (default: the newest checkpoint of the workspace, else
        job.conf's checkpoint_path), as ``singa test``. Returns a :class:`TestResult`."""
        from singa_core.running.checkpoint import choose_checkpoint
        from singa_core.running.job import prepare_job
        from singa_core.running.paths import readable_file_problem

        job_copy = type(self.cfg.job)()
        job_copy.CopyFrom(self.cfg.job)
        cfg = replace(self.cfg, job=job_copy)
        j = cfg.job
        ws = self.workspace_override or j.cluster.workspace
        default_files = False  # the workspace's newest checkpoint
        if checkpoints:
            files = [Path(c) for c in checkpoints]
            for c in files:
                problem = readable_file_problem(str(c))
                if problem is not None and problem != "is a folder, not a file":
                    raise SingaError(
                        "checkpoint file not found"
                        if problem == "does not exist"
                        else f"checkpoint file {problem}",
                        where=str(c),
                        help="give a WORKSPACE/checkpoint/step<S>-worker<W> file",
                    )
            del j.checkpoint_path[:]
            j.checkpoint_path.extend(str(c) for c in files)
        else:
            # the model this job.conf trained: the newest checkpoint of its workspace (it
            # holds every Param, those fine-tuned from checkpoint_path included); without
            # one, checkpoint_path (e.g. a sampling job that reads another job's model)
            # (chosen by the rule every command uses: running.checkpoint.choose_checkpoint)
            found = choose_checkpoint(ws) if ws else None
            if found is not None:
                default_files = True
                del j.checkpoint_path[:]
                j.checkpoint_path.extend(str(f) for f in found.files)
            elif not j.checkpoint_path:
                raise SingaError(
                    f"no checkpoint to test: {Path(ws or '.') / 'checkpoint'} has none and "
                    "checkpoint_path is empty",
                    where=cfg.path,
                    help="train first, or pass --checkpoint FILE",
                )
        n = steps if steps is not None else j.test_steps
        if n <= 0:
            raise SingaError(
                "no test steps",
                where=cfg.locate("test_steps"),
                help="set test_steps in job.conf or pass --steps N",
            )
        prepared = prepare_job(
            cfg,
            self.host,
            test_only=True,
            seed=self.seed,
            workspace=self.workspace_override,
            device=self.device,
        )
        for line in prepared.notices.values():
            print(line, file=self.err)
        self._choose_test_threads(prepared)
        engine_cls = select_engine(prepared.host, j, self.engine_name)
        eng = engine_cls(prepared, Reporter(out=self.out, err=self.err, live=False))
        metrics = eng.test(n)
        from singa_core.inference.model import checkpoint_report
        from singa_core.running.checkpoint import checkpoint_info

        files = list(j.checkpoint_path)
        notes = []
        if default_files:
            notes = checkpoint_report(files, ws)[len(files) :]
        return TestResult(dict(metrics or {}), n, files, [checkpoint_info(f) for f in files], notes)
