"""A trained model: the deploy net with the Params of a checkpoint.

::

    job = Job.from_file("examples/mnist/job.conf")
    model = job.model()                  # the newest checkpoint of the workspace
    probs = model.predict(x)             # x: (N, *model.sample_shape) raw values, 0-255
    classes = model.predict_classes(x)   # (N,) class indices; top_k=3 -> (N, 3)

``predict`` takes raw samples exactly as the data layer reads them from records and applies
the data layer's own preprocessing (mean/std, mean file), then runs the deploy net
(:mod:`singa_core.netbuilder.deploy`) forward with phase ``kDeploy``: no dropout, the test
crops. The net is built for ``batch`` rows (default :data:`BATCH`) and shares the
checkpoint's arrays (no copies, no gradients, no updater). Any number of rows works: they
run ``batch`` at a time; a pass of fewer rows (one sample, the rest of a batch) runs on a
net built for the next power of two of them (1, 2, 4, ... rows; built once, sharing the
same arrays), so a few rows cost what those rows cost. BLAS picks its kernels by the
matrix sizes and rounds differently with each, so a row's prediction may then differ in
the last bits (float32 rounding, ~1e-7 relative) with the number of rows it came with;
``fixed_passes=True`` runs every pass at ``batch`` rows (the last one padded) and makes it
bit-identical whatever that number. A recurrent model (a sampling net) always runs its
``batch`` rows: each row carries its own state.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np

from singa_core.contracts.errors import SingaError
from singa_core.contracts.layer import kDeploy, kForward
from singa_core.contracts.names import plain_param_name
from singa_core.contracts.param import DTYPE
from singa_core.inference.input_layout import conform
from singa_core.inference.input_range import InputRangeWarning, range_warning, trained_range
from singa_core.netbuilder.deploy import DeployPlan, deploy_job
from singa_core.netbuilder.net import NeuralNet

#: rows per forward pass (inputs run in passes of this many rows, the last one padded)
BATCH = 64


def checkpoint_files(workspace: str | Path | None, checkpoint=None, fallback=()) -> list[Path]:
    """The checkpoint files a model loads: ``checkpoint`` (a file, a checkpoint folder or a
    workspace: the step :func:`~singa_core.running.checkpoint.choose_checkpoint` picks
    there), else the step it picks in ``workspace``, else ``fallback`` (job.conf's
    checkpoint_path). The same rule as ``singa train --resume``'s."""
    from singa_core.running.checkpoint import choose_checkpoint
    from singa_core.running.paths import readable_file_problem

    if checkpoint is not None:
        path = Path(checkpoint)
        if path.is_dir():  # a checkpoint folder or a workspace: the step the rule picks
            chosen = choose_checkpoint(path.parent if path.name == "checkpoint" else path)
            if chosen is not None:
                return list(chosen.files)
            what = "no checkpoint in this folder"
        else:
            problem = readable_file_problem(str(path))
            if problem is None:
                return [path]
            # a FIFO, a device, ...: refused, never opened (it could block forever)
            what = "checkpoint not found" if problem == "does not exist" else problem
            what = what if what == "checkpoint not found" else f"checkpoint {what}"
        raise SingaError(
            what,
            where=str(path),
            help="give a WORKSPACE/checkpoint/step<S>-worker<W> file, its folder or the workspace",
        )
    chosen = choose_checkpoint(workspace) if workspace else None
    if chosen is not None:
        return list(chosen.files)
    if fallback:
        return [Path(f) for f in fallback]
    raise SingaError(
        f"no trained model: {Path(workspace or '.') / 'checkpoint'} holds no checkpoint and "
        "checkpoint_path is empty",
        where=str(workspace or "."),
        help="train first (`singa train JOB.conf`), or give --checkpoint FILE",
    )


def from_workspace(workspace, checkpoint=None) -> bool:
    """Whether :func:`checkpoint_files` picks a checkpoint of the workspace by the rule."""
    from singa_core.running.checkpoint import checkpoint_steps

    return checkpoint is None and bool(workspace) and bool(checkpoint_steps(workspace))


def checkpoint_report(files, workspace=None, *, default: bool = True) -> list[str]:
    """The lines that say which checkpoint a command uses: ``checkpoint: PATH (step S,
    written WHEN, by the run started WHEN (pid, command))`` per file, and, when the files
    are the workspace's newest (``default``), a note if a folder an earlier run's checkpoints
    were moved to holds a later step (a longer run than the one in use)."""
    from singa_core.running.checkpoint import checkpoint_info, moved_aside_note

    infos = [checkpoint_info(f) for f in files]
    lines = [f"checkpoint: {info}" for info in infos]
    if default and workspace and infos:
        note = moved_aside_note(workspace, infos[-1].step)
        if note:
            lines.append(note)
    return lines


def read_model_values(files) -> dict[str, np.ndarray]:
    """Param name (without SINGA's ``0#``) -> float32 value, the files applied in order
    (later ones override earlier ones, as checkpoint_path does); every file verified."""
    from singa_core.running.checkpoint import read_params

    values: dict[str, np.ndarray] = {}
    for f in files:
        for rec in read_params(f):
            values[plain_param_name(rec.name)] = np.ascontiguousarray(rec.value, dtype=DTYPE)
    return values


class Model:
    """The deploy net of a job with trained values; see the module text."""

    def __init__(
        self,
        plan: DeployPlan,
        get_plugin,
        values: dict[str, np.ndarray],
        *,
        sample_shape: tuple[int, ...] | None = None,
        source=(),
        batch: int = BATCH,
        device=None,
        fixed_passes: bool = False,
    ) -> None:
        # where the deploy net computes (a Device or a spec: "cpu", "cuda:0"); predictions
        # come back to the host. A model trained on a GPU needs none to predict.
        from singa_core.contracts.device import open_device

        self.device = open_device(device if device is not None else "cpu", where="device")
        if len(plan.inputs) != 1:
            raise SingaError(
                f"the deploy net has {len(plan.inputs)} inputs ({', '.join(plan.inputs)}); "
                "predicting feeds one",
                where=plan.locate("neuralnet"),
                help="give the net one data layer for prediction (`include: kDeploy`)",
            )
        self.plan = plan
        self.get_plugin = get_plugin
        self.values = values
        self.source = [str(s) for s in source]  # the checkpoint files
        from singa_core.running.checkpoint import checkpoint_info

        # which checkpoint(s): path, step, when and by which run written (CheckpointInfo);
        # ``checkpoint`` is the last one applied (later files override earlier ones)
        self.checkpoints = [checkpoint_info(f) for f in self.source]
        self.checkpoint = self.checkpoints[-1] if self.checkpoints else None
        self.checkpoint_notes: list[str] = []  # e.g. a longer run's model moved aside
        if int(batch) < 1:
            raise SingaError(
                f"batch must be at least 1, got {batch}",
                where="batch",
                help="the rows of one forward pass, e.g. 64",
            )
        self.batch = int(batch)
        self.fixed_passes = bool(fixed_passes)
        self._small: dict[int, NeuralNet] = {}  # rows -> the net of a short pass
        self._given_shape = tuple(sample_shape) if sample_shape else None
        self._built: NeuralNet | None = None
        probe = self.net
        layer = probe.by_name[plan.inputs[0]]
        self.sample_shape: tuple[int, ...] = tuple(int(s) for s in layer.sample_shape())
        out = probe.by_name[plan.output].data
        self.output_shape: tuple[int, ...] = tuple(int(s) for s in out.shape[1:])
        self._check_values(probe)
        # recurrent layers that run once per pass carry their state to the next pass (a
        # sampling net: each prediction continues the sequence), as kBPTT does at test steps
        self.carriers = [layer for layer in probe.layers if layer.recurrent]
        #: the range of the raw values the job was trained on (None: unknown); predict
        #: warns when its inputs are far from it (singa_core.inference.input_range)
        self.trained_range = None

    # -- loading -----------------------------------------------------------------------
    @classmethod
    def load(cls, cfg, host, *, checkpoint=None, workspace=None, **kw) -> Model:
        """The model of ``cfg`` (a parsed job.conf): its deploy net and the Params of
        ``checkpoint`` (default: the workspace's newest, else checkpoint_path)."""
        from singa_core.inference.deploy_hint import add_sibling_hint

        job = cfg.job
        try:  # the net first: a job without one is told so before any checkpoint is sought
            plan = deploy_job(job, host.get, cfg.locate)
        except SingaError as err:
            raise add_sibling_hint(err, getattr(cfg, "path", None), host.get) from None
        ws = workspace or (job.cluster.workspace if job.cluster.HasField("workspace") else "")
        files = checkpoint_files(ws, checkpoint, list(job.checkpoint_path))
        values = read_model_values(files)
        model = cls(plan, host.get, values, source=files, **kw)
        if from_workspace(ws, checkpoint):
            model.checkpoint_notes = checkpoint_report(files, ws)[len(files) :]
        model.trained_range = trained_range(job, host.get)
        return model

    @property
    def input_name(self) -> str:
        return self.plan.inputs[0]

    @property
    def num_outputs(self) -> int:
        return int(math.prod(self.output_shape))

    def _check_values(self, net: NeuralNet) -> None:
        missing = [p.name for p in net.owner_params if plain_param_name(p.name) not in self.values]
        if missing:
            raise SingaError(
                f"the checkpoint lacks {len(missing)} Param(s) of the deploy net: "
                + ", ".join(missing[:8]),
                where=", ".join(self.source) or None,
                help="give the checkpoint this job.conf wrote (--checkpoint FILE)",
            )

    @property
    def net(self) -> NeuralNet:
        """The deploy net, set up for :attr:`batch` rows."""
        if self._built is None:
            self._built = self._create(self.batch)
        return self._built

    def _create(self, batchsize: int) -> NeuralNet:
        return NeuralNet.create(
            self.plan.job,
            kDeploy,
            get_plugin=self.get_plugin,
            locate=self.plan.locate,
            init_params=False,
            batchsize=batchsize,
            sample_shape=self._given_shape,
            param_values=_PlainNames(self.values),
            devices=self.device,
        )

    # -- predicting --------------------------------------------------------------------
    def _check_input(self, x, layout: str | None = None) -> np.ndarray:
        x = np.asarray(x)
        if x.dtype.kind not in "fiub":
            raise SingaError(
                f"input must be numbers, got an array of {x.dtype}",
                where="input",
                help="give raw sample values, e.g. pixels 0-255",
            )
        x = conform(x, self.sample_shape, layout=layout)  # see input_layout: no reshape by size
        return np.ascontiguousarray(x, dtype=DTYPE)

    def check_range(self, x: np.ndarray, stacklevel: int = 2) -> None:
        """Warn (:class:`InputRangeWarning`) when the values of ``x`` are far from the range
        the job was trained on: normalised inputs to a model of raw pixels, or the other way."""
        message = range_warning(x, self.trained_range)
        if message is not None:
            warnings.warn(message, InputRangeWarning, stacklevel=stacklevel + 1)

    def reset_state(self) -> None:
        """Recurrent nets: start every row's sequence over (zero states)."""
        for layer in self.carriers:
            layer.reset_state()

    def predict(self, x, layout: str | None = None) -> np.ndarray:
        """The output layer's values for ``x`` (``(N, *sample_shape)`` raw values):
        ``(N, K)`` float32 (class probabilities for a softmax loss). A recurrent net carries
        each row's state from one call to the next (row i continues row i; see
        :meth:`reset_state`), so it takes at most :attr:`batch` rows a call.

        ``layout="NHWC"`` takes images channels last, ``(N, H, W, C)``; a shape that matches
        the samples only by size is refused (:mod:`singa_core.inference.input_layout`).
        Inputs far from the range the job was trained on give an :class:`InputRangeWarning`."""
        x = self._check_input(x, layout)
        self.check_range(x)
        n, b = x.shape[0], self.batch
        if self.carriers and n > b:
            raise SingaError(
                f"a recurrent model carries each row's state from one call to the next, so "
                f"it predicts at most {b} rows a call, got {n}",
                where="input",
                help=f"build it for more rows: job.model(batch={n})",
            )
        out = np.empty((n, self.num_outputs), dtype=DTYPE)
        for start in range(0, n, b):
            chunk = x[start : start + b]
            rows = chunk.shape[0]
            size = self.pass_rows(rows)
            if rows < size:  # padded to the pass's rows (see the module text)
                pad = np.zeros((size, *self.sample_shape), dtype=DTYPE)
                pad[:rows] = chunk
                chunk = pad
            out[start : start + rows] = self._forward(chunk, self._net_of(size))[:rows]
        return out

    def pass_rows(self, rows: int) -> int:
        """The rows of the pass that predicts ``rows`` (at most :attr:`batch`) rows: the
        next power of two, or :attr:`batch` with ``fixed_passes`` or recurrent state."""
        if rows >= self.batch or self.fixed_passes or self.carriers:
            return self.batch
        return min(self.batch, 1 << (rows - 1).bit_length())

    def _net_of(self, rows: int) -> NeuralNet:
        if rows == self.batch:
            return self.net
        net = self._small.get(rows)
        if net is None:
            net = self._small[rows] = self._create(rows)
        return net

    def _forward(self, chunk: np.ndarray, net: NeuralNet | None = None) -> np.ndarray:
        net = self.net if net is None else net
        net.by_name[self.input_name].feed(chunk)
        phase = kDeploy | kForward
        for layer in net.layers:
            if layer.name != self.input_name:
                layer.forward(phase, net.srclayers(layer))
        for layer in self.carriers:
            layer.carry_state()
        data = net.by_name[self.plan.output].data
        if not self.device.is_host:
            from singa_core.contracts.device import to_host

            data = to_host(data)
        return data.reshape(chunk.shape[0], -1)

    def predict_classes(self, x, top_k: int = 1, layout: str | None = None) -> np.ndarray:
        """The ``top_k`` highest-scoring output indices of each row, best first (ties: the
        lower index first): ``(N,)`` for ``top_k=1``, else ``(N, top_k)``."""
        if not 1 <= int(top_k) <= self.num_outputs:
            raise SingaError(
                f"top_k must be between 1 and {self.num_outputs}, got {top_k}",
                where="top_k",
                help="ask for at most as many classes as the model outputs",
            )
        scores = self.predict(x, layout)
        order = np.argsort(-scores, axis=1, kind="stable")[:, : int(top_k)]
        return order[:, 0] if int(top_k) == 1 else order


class _PlainNames(dict):
    """The checkpoint values looked up by a deploy net's Param names: ``"0#w"`` and ``"w"``
    alike; a value stored flat is reshaped (a view) by the Param that takes it."""

    def get(self, name, default=None):
        return super().get(plain_param_name(name), default)
