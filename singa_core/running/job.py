"""A job made ready to run: config + plugins + validated nets + resume/seed decisions.

:func:`prepare_job` does every check that can fail because of the user's input *before*
the first training step: it resolves the worker, updater and learning-rate types, builds
the train/validation/test nets (shape inference), opens the data stores, and checks the
workspace and checkpoints. Engines receive a :class:`PreparedJob`.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from singa_core.contracts.device import CPU, open_device, worker_device_specs
from singa_core.contracts.errors import SingaError
from singa_core.contracts.layer import kTest, kTrain, kVal
from singa_core.contracts.memory import MemoryEstimate, available_memory, estimating
from singa_core.jobconf.limits import check_limits
from singa_core.jobconf.parse import JobConfig
from singa_core.netbuilder.net import (
    PHASE_NAMES,
    NeuralNet,
    init_param,
    layer_type_name,
    param_generator_name,
)
from singa_core.plugin_host.host import PluginHost
from singa_core.plugin_host.registry import type_selection
from singa_core.running.checkpoint import (
    checkpoint_write_bytes,
    find_resume,
    load_param_files,
)
from singa_core.running.numeric import check_config
from singa_core.running.paths import bad_path_text, readable_file_problem, writable_folder_problem
from singa_core.schema import job_pb2


def worker_type_name(alg) -> str:
    """``user_alg`` if set (a UserTypeName), else the AlgType name."""
    return type_selection(alg, "alg", "user_alg")


def updater_type_name(conf) -> str:
    return type_selection(conf, "type", "user_type")


def lr_type_name(conf) -> str:
    return type_selection(conf, "type", "user_type")


@dataclass
class PreparedJob:
    cfg: JobConfig
    host: PluginHost
    seed: int
    workspace: Path
    resume: tuple[int, list[Path]] | None = None  # (step, checkpoint files)
    nets: dict[int, NeuralNet] = field(default_factory=dict)  # built during validation
    # the memory the nets built so far allocate (charged before allocating, see
    # singa_core.contracts.memory); None: nothing estimated or checked (e.g. in an engine's process)
    memory: MemoryEstimate | None = None

    @property
    def job(self) -> job_pb2.JobProto:
        return self.cfg.job

    @property
    def start_step(self) -> int:
        return self.resume[0] if self.resume else int(self.job.step)

    notices: dict[str, str] = field(default_factory=dict)  # one line per alias used
    # only the test net runs (singa test): a job.conf without an updater is fine
    test_only: bool = False
    resume_meta: dict = field(default_factory=dict)  # training-state metadata of `resume`
    # where each worker of a group computes (SINGA 0.3's `gpu` field, or --device): the
    # device of partition j of the train net is devices[j]; empty: the CPU
    devices: list = field(default_factory=list)

    def get_plugin(self, kind: str, name: str):
        obj = self.host.get(kind, name)
        entry = self.host.registry(kind).entry(name)
        if entry is not None and entry.alias_of and name not in self.notices:
            why = getattr(obj, "alias_note", "")
            self.notices[name] = f"note: {kind} type {name} runs as {entry.alias_of}" + (
                f" ({why})" if why else ""
            )
        return obj

    @property
    def num_partitions(self) -> int:
        """Partitions of the train net: the workers of a group (SINGA's npartitions)."""
        return max(int(self.job.cluster.nworkers_per_group), 1)

    def build_net(
        self,
        phase: int,
        *,
        init: bool = True,
        num_partitions: int | None = None,
        devices: list | None = None,
    ) -> NeuralNet:
        """The net of ``phase``, partitioned across the workers of a group (default: the
        cluster's nworkers_per_group; a worker runs ``net.partition_view(its id)``)."""
        with estimating(self.memory, PHASE_NAMES.get(phase, str(phase))):
            net = NeuralNet.create(
                self.job,
                phase,
                get_plugin=self.get_plugin,
                locate=self.cfg.locate,
                seed=self.seed,
                init_params=init,
                num_partitions=self.num_partitions if num_partitions is None else num_partitions,
                devices=devices or self.devices or None,
            )
        self.notices.update(net.notes)
        return net

    def device_lines(self) -> list[str]:
        """Which worker of a group runs on which device, for the first lines and the
        dry-run."""
        remote = getattr(self, "remote_device_specs", None)
        if remote:  # an engine whose workers compute on other machines' GPUs (Ray)
            return [
                f"device: worker {j} on a GPU of the Ray node that runs it ({spec} in the "
                "job; opened there before step 0, not on this machine)"
                if spec.startswith("cuda") else f"device: worker {j} on {spec}"
                for j, spec in enumerate(remote)
            ]  # fmt: skip
        devices = self.devices or [CPU]
        if all(d == devices[0] for d in devices):
            who = "every worker" if self.num_partitions > 1 else "worker 0"
            return [f"device: {who} on {devices[0].describe()}"]
        return [f"device: worker {j} on {d.describe()}" for j, d in enumerate(devices)]

    def _create(
        self,
        kind: str,
        name: str,
        type_field: str,
        conf_field: str,
        *args,
        what: str | None = None,
        missing_help: str | None = None,
    ):
        """Look up a registered type and construct it; errors located in job.conf."""
        try:
            cls = self.host.get(kind, name, what=what)
        except SingaError as exc:
            if missing_help:
                exc.help = missing_help
            raise exc.located(self.cfg.locate(type_field)) from None
        try:
            return cls(*args)
        except SingaError as exc:  # the plugin rejected its configuration
            path = f"{conf_field}.{exc.field}" if exc.field else conf_field
            raise exc.located(self.cfg.locate(path)) from None

    def make_worker(self):
        alg = self.job.train_one_batch
        user = alg.HasField("user_alg")
        return self._create(
            "worker",
            worker_type_name(alg),
            "train_one_batch.user_alg" if user else "train_one_batch.alg",
            "train_one_batch",
            self.job,
            what="algorithm",
            missing_help="set the algorithm: `train_one_batch { alg: kBP }` (or user_alg for a "
            "plugin's algorithm)"
            if not user and alg.alg == job_pb2.kUserAlg
            else None,
        )

    def make_updater(self):
        conf = self.job.updater
        if not self.job.HasField("updater") and self.test_only:
            from singa_core.contracts.updater import EvaluationOnly

            return EvaluationOnly()
        if not self.job.HasField("updater"):
            raise SingaError(
                "job.conf has no updater",
                where=self.cfg.locate(),
                help="add e.g. `updater { type: kSGD learning_rate { type: kFixed "
                "base_lr: 0.01 } }`",
            )
        lr_conf = conf.learning_rate
        unset = lr_type_name(lr_conf) == "kUserChange" and not lr_conf.HasField("user_type")
        lr = self._create(
            "lr_change",
            lr_type_name(lr_conf),
            "updater.learning_rate.user_type"
            if lr_conf.HasField("user_type")
            else "updater.learning_rate.type",
            "updater.learning_rate",
            lr_conf,
            what="learning-rate change method",
            missing_help="set one, e.g. `learning_rate { type: kFixed base_lr: 0.01 }`"
            if unset
            else None,
        )
        return self._create(
            "updater",
            updater_type_name(conf),
            "updater.user_type" if conf.HasField("user_type") else "updater.type",
            "updater",
            conf,
            lr,
        )

    def phases(self) -> list[int]:
        """Phases whose nets the job needs: train, plus validation/test when configured."""
        out = [kTrain]
        if self.job.validate_steps > 0 and self.job.validate_freq > 0:
            out.append(kVal)
        if self.job.test_steps > 0 and self.job.test_freq > 0:
            out.append(kTest)
        return out


def open_worker_devices(cfg, nworkers: int, override: str | None) -> list:
    """The device of each of a group's ``nworkers`` workers: ``override`` (``--device``)
    for all, else job.conf's ``gpu`` with SINGA 0.3's meaning (worker i on ``gpu[i]``,
    workers beyond the list on the CPU). Each is opened here, so a GPU the job cannot have
    is a located error before step 0."""
    job = cfg.job
    specs = worker_device_specs(list(job.gpu), nworkers, override)
    devices = []
    for i, spec in enumerate(specs):
        if override is not None:
            where = "--device"
        elif i < len(job.gpu):
            where = cfg.locate(f"gpu[{i}]")
        else:  # a worker beyond the gpu list: on the CPU
            where = cfg.locate(None)
        devices.append(open_device(spec, where=where))
    return devices


def prepare_job(
    cfg: JobConfig,
    host: PluginHost,
    *,
    resume: bool = False,
    resume_from: int | None = None,
    seed: int | None = None,
    workspace: str | None = None,
    test_only: bool = False,
    device: str | None = None,
) -> PreparedJob:
    job = cfg.job
    if seed is not None:
        job.seed = seed
    ws = workspace or (job.cluster.workspace if job.cluster.HasField("workspace") else "")
    if not ws:
        raise SingaError(
            "job.conf names no workspace",
            where=cfg.locate("cluster"),
            help='add `cluster { workspace: "path/to/folder" }` (checkpoints and metrics go there)',
        )
    wsp = Path(ws)
    ws_where = "--workspace" if workspace else cfg.locate("cluster.workspace")
    bad = bad_path_text(ws)  # a NUL or a name too long: os calls would raise on it
    if bad:
        raise SingaError(
            f"the workspace path {bad}: {ws}",
            where=ws_where,
            help="choose a folder path for cluster.workspace",
        )
    if wsp.exists() and not wsp.is_dir():
        raise SingaError(
            f"workspace {ws} exists and is not a folder",
            where=ws_where,
            help="choose a folder path for cluster.workspace",
        )
    problem = None if test_only else writable_folder_problem(ws, what="it")
    if problem:  # checkpoints and metrics.jsonl are written there
        raise SingaError(
            f"workspace {ws}: {problem}",
            where=ws_where,
            help="choose a folder that exists or can be created and is writable "
            "(checkpoints and metrics.jsonl go there)",
        )
    if not test_only and job.train_steps <= 0:
        raise SingaError(
            f"train_steps is {job.train_steps}: nothing to train",
            where=cfg.locate("train_steps"),
            help="set a positive number of steps, e.g. `train_steps: 1000`",
        )
    check_limits(cfg)  # negative counts, sizes, shapes (a JobProto built in Python too)
    from singa_core.netbuilder.sequences import runs_enabled

    runs_enabled()  # SINGA_SEQUENCE_RUNS neither on nor off: refused before anything runs
    if not job.HasField("neuralnet") or not job.neuralnet.layer:
        raise SingaError(
            "job.conf defines no layers",
            where=cfg.locate("neuralnet"),
            help="add `neuralnet { layer { ... } }`",
        )
    for name in (
        "disp_freq",
        "test_freq",
        "validate_freq",
        "checkpoint_freq",
        "test_steps",
        "validate_steps",
        "train_steps",
        "keep_checkpoints",
    ):
        if getattr(job, name) < 0:
            raise SingaError(
                f"{name} must not be negative",
                where=cfg.locate(name),
                help=f"set {name} to 0 (off) or a positive number",
            )

    found, resume_meta = None, {}
    if resume or resume_from is not None:
        # the newest checkpoint (or step resume_from), verified: a damaged one is refused
        step, files, resume_meta = find_resume(wsp, resume_from)
        found = (step, files)
        saved = resume_meta.get("seed")
        if not job.HasField("seed") and saved is not None:  # the seed the run started with
            job.seed = int(saved)
    if not job.HasField("seed"):
        job.seed = secrets.randbits(31)
    prepared = PreparedJob(
        cfg=cfg, host=host, seed=int(job.seed), workspace=wsp, resume=found, resume_meta=resume_meta
    )
    prepared.test_only = test_only
    prepared.devices = open_worker_devices(cfg, prepared.num_partitions, device)
    _check_conflicting_plugins(prepared)
    check_config(cfg)  # non-finite updater settings: a located error before step 0
    worker = prepared.make_worker()
    updater = prepared.make_updater()
    for i, p in enumerate(job.checkpoint_path):
        if not os.path.exists(p):
            raise SingaError(
                f"checkpoint file not found: {p}",
                where=cfg.locate("checkpoint_path"),
                help="checkpoint_path lists files like WORKSPACE/checkpoint/step1000-worker0",
            )
        problem = readable_file_problem(p)
        if problem:
            raise SingaError(
                f"checkpoint_path {p} {problem}",
                where=cfg.locate(f"checkpoint_path[{i}]"),
                help="checkpoint_path lists files like WORKSPACE/checkpoint/step1000-worker0",
            )
    limit, source = available_memory()
    prepared.memory = MemoryEstimate(
        limit, source, updater_slots=len(getattr(updater, "state_names", ()))
    )
    files = found[1] if found else list(job.checkpoint_path)
    train = prepared.build_net(kTrain, init=not files)
    prepared.nets[kTrain] = train
    compiler = updater.host_compiler_memory() if hasattr(updater, "host_compiler_memory") else None
    if compiler is not None and not test_only:  # once, with the layers' compilers (after them)
        key, n, row, note = compiler
        prepared.memory.charge_once(
            PHASE_NAMES[kTrain], key, n, row=row, note=note, where=cfg.locate("updater")
        )
    if not test_only:  # what writing a checkpoint costs beyond the Params (streamed)
        prepared.memory.charge(
            "train",
            "(checkpoint write)",
            "scratch",
            checkpoint_write_bytes(train.owner_params),
            where=cfg.locate("checkpoint_freq"),
            what="writing a checkpoint",
        )
    if not getattr(worker, "handles_unrolled_nets", False) and any(
        p.grad_owner is not p for p in train.params
    ):
        raise SingaError(
            f"the net is unrolled (unroll_len > 1) but algorithm "
            f"{worker_type_name(job.train_one_batch)} does not train unrolled nets",
            where=cfg.locate("train_one_batch"),
            help="use `train_one_batch { alg: kBPTT }` (back-propagation through time), or "
            "set unroll_len: 1",
        )
    if files:
        # SINGA's InitNetParams: load (later files override earlier ones), then initialise
        # only the Params no file held: a loaded Param keeps its values whatever its saved
        # version (SINGA-107) and needs no `init` (rbm2.conf's w1). Done here so a bad
        # checkpoint is reported before training; the engine loads resume files again.
        loaded = load_param_files(
            train.owner_params,
            files,
            start_step=prepared.start_step,
            reset_version=job.reset_param_version and not found,
        )
        _init_unloaded(prepared, train, loaded, files)
    for phase in prepared.phases()[1:]:
        net = prepared.build_net(phase, init=not files, num_partitions=1)  # as 0.3
        net.share_params_from(train, cfg.locate)
        _release_shared_params(prepared, phase, net)  # counted once, in the training net
        if files:  # the Params of this phase only
            _init_unloaded(prepared, net, set(), files)
        prepared.nets[phase] = net
    return prepared


def _release_shared_params(prepared: PreparedJob, phase: int, net: NeuralNet) -> None:
    """Take the Params ``net`` shares with the training net out of the memory estimate:
    the values it allocated for them are dropped and their gradients never written (a test
    pass has no backward), so only the training net's copy stays in memory."""
    if prepared.memory is None:
        return
    for layer in net.layers:
        shared = sum(p.size for p in layer.params if p.owner is not p and not p.is_mirror)
        if shared:  # value and gradient, float32, as create_param charged them
            name = PHASE_NAMES.get(phase, str(phase))
            prepared.memory.release(name, layer.name, "params", 2 * 4 * shared)


def _init_unloaded(prepared: PreparedJob, net: NeuralNet, loaded: set[str], files) -> None:
    """Initialise (version = start step) the owner Params no checkpoint file held."""
    for layer in net.layers:
        spec = net.specs[layer.name]
        for j, p in enumerate(layer.params):
            if not p.is_owner or p.name in loaded:
                continue
            where = None
            if spec.conf_index is not None:
                where = prepared.cfg.locate(f"neuralnet.layer[{spec.conf_index}].param[{j}]")
            try:
                init_param(p, prepared.get_plugin, prepared.seed, where, prepared.start_step)
            except SingaError as err:
                err.notes.append(f"it is in none of the checkpoints {', '.join(map(str, files))}")
                raise


def _selected_types(job) -> list[tuple[str, str, str]]:
    """(kind, registry key, field path in job.conf) of every type the job names."""

    def pick(msg, path: str, enum_field: str, user_field: str) -> str:
        user = msg.HasField(user_field) and getattr(msg, user_field)
        return f"{path}.{user_field if user else enum_field}"

    out = []
    for i, layer in enumerate(job.neuralnet.layer):
        path = f"neuralnet.layer[{i}]"
        out.append(("layer", layer_type_name(layer), pick(layer, path, "type", "user_type")))
        for j, param in enumerate(layer.param):
            if param.HasField("init"):
                out.append(
                    (
                        "param_generator",
                        param_generator_name(param.init),
                        pick(param.init, f"{path}.param[{j}].init", "type", "user_type"),
                    )
                )
    alg = job.train_one_batch
    out.append(("worker", worker_type_name(alg), pick(alg, "train_one_batch", "alg", "user_alg")))
    if job.HasField("updater"):
        up = job.updater
        out.append(("updater", updater_type_name(up), pick(up, "updater", "type", "user_type")))
        lr = up.learning_rate
        out.append(
            (
                "lr_change",
                lr_type_name(lr),
                pick(lr, "updater.learning_rate", "type", "user_type"),
            )
        )
    return out


def _check_conflicting_plugins(prepared: PreparedJob) -> None:
    """A type claimed by two plugins is an error only if the job uses it; the error points
    at the job.conf field that names it (the first, if several do)."""
    for kind, name, path in _selected_types(prepared.job):
        if prepared.host.registry(kind).conflict_for(name) is None:
            continue
        try:
            prepared.host.get(kind, name)
        except SingaError as exc:
            raise exc.located(prepared.cfg.locate(path)) from None
