"""The search-space file of ``singa tune``: parsed, then checked against the job.conf.

A space is protobuf text (``singa.tune.TuneProto``, ``proto/tune.proto``), so it reads like
job.conf::

    param { field: "updater.learning_rate.base_lr"  log_uniform { low: 0.0001 high: 0.1 } }
    param { field: "updater.momentum"  uniform { low: 0 high: 0.95 } }
    param { field: "neuralnet.layer[2].innerproduct_conf.num_output"  int { low: 100 high: 2500 } }
    param { field: "updater.type"  choice { value: "kSGD" value: "kNesterov" } }
    objective { metric: "accuracy" }
    budget { trials: 24 train_steps: 600 }
    early_stopping { rule: MEDIAN }

:func:`load_space` checks everything before trial 0, each mistake located in the space file
(``FILE:LINE:COL: error: ...`` and a ``help:`` line): a field path that job.conf's schema
lacks (the same paths as ``-o``), a distribution that does not fit the field's type (a real
range for a whole-number field, a range for an enum), bounds out of order or out of the
field's range, a choice value the field cannot take, the objective's phase without passes
in the job; then the job itself with every field at its lowest and at its highest value
(``prepare_job``: types, shapes, data files, memory), errors located at the space's line
that set the field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path

from google.protobuf import text_format
from google.protobuf.descriptor import FieldDescriptor

from singa_core.contracts.errors import Location, SingaError, did_you_mean
from singa_core.jobconf.parse import (
    _PATH_PART,
    JobConfig,
    _extension_field,
    _parse_error,
    _split_path,
    apply_override,
    index_locations,
    parse_field_path,
)
from singa_core.schema import tune_pb2

KINDS = ("choice", "uniform", "log_uniform", "int", "int_log_uniform")
MAX_SPACE_BYTES = 1 << 20
_FLOATS = (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE)
_EXAMPLE = 'param { field: "updater.learning_rate.base_lr"  log_uniform { low: 0.0001 high: 0.1 } }'
# fields the study itself sets for every trial
_STUDY_SETS = {"cluster.workspace": "the study gives every trial its own workspace"}


@dataclass
class Dimension:
    """One field of job.conf the study varies."""

    field: str  # the -o path
    kind: str  # one of KINDS
    low: float | int | None = None
    high: float | int | None = None
    step: float | int | None = None
    choices: list[str] = field(default_factory=list)
    integer_field: bool = False
    where: Location | None = None

    @property
    def short(self) -> str:
        """A column heading: the path's last part (``base_lr``, ``num_output``)."""
        return _split_path(self.field)[-1]

    def distribution(self):
        """The Optuna distribution of the values."""
        import optuna.distributions as d

        if self.kind == "choice":
            return d.CategoricalDistribution(tuple(self.choices))
        if self.kind in ("int", "int_log_uniform"):
            return d.IntDistribution(
                int(self.low), int(self.high), log=self.kind == "int_log_uniform",
                step=int(self.step or 1),
            )  # fmt: skip
        return d.FloatDistribution(
            float(self.low), float(self.high), log=self.kind == "log_uniform",
            step=None if not self.step else float(self.step),
        )  # fmt: skip

    def text(self, value) -> str:
        """The value as ``-o FIELD=VALUE`` writes it."""
        if self.kind == "choice":
            return str(value)
        if self.kind in ("int", "int_log_uniform"):
            return str(int(value))
        return repr(float(value))

    def override(self, value) -> str:
        return f"{self.field}={self.text(value)}"


@dataclass
class Objective:
    metric: str = "accuracy"
    phase: str = "test"  # or "validation"
    at: str = "last"  # or "best"
    maximize: bool = True

    def describe(self) -> str:
        way = "maximise" if self.maximize else "minimise"
        return f"{way} {self.phase} {self.metric} ({self.at} pass)"


@dataclass
class SearchSpace:
    """A checked search space (see the module docstring)."""

    path: str
    text: str
    proto: tune_pb2.TuneProto
    dims: list[Dimension]
    objective: Objective
    trials: int
    train_steps: int | None
    trial_seconds: float | None
    study_seconds: float | None
    sampler: str  # "tpe" or "random"
    sampler_startup: int
    stopping: str  # "median", "asha", "hyperband", "none"
    min_steps: int
    stopping_startup: int
    reduction_factor: int
    locations: dict = field(default_factory=dict)

    def locate(self, path: str | None = None) -> Location:
        if path is None:
            return Location(self.path)
        key = parse_field_path(path)
        while key:
            if key in self.locations:
                return Location(self.path, *self.locations[key])
            key = key[:-2]
        return Location(self.path)

    def overrides(self, params: dict) -> list[str]:
        """The ``-o`` texts of a trial's values (by field path), the budget's steps last."""
        out = [d.override(params[d.field]) for d in self.dims if d.field in params]
        if self.train_steps is not None:
            out.append(f"train_steps={self.train_steps}")
        return out


# -- parsing -------------------------------------------------------------------------------
def parse_space_text(text: str, path: str) -> tuple[tune_pb2.TuneProto, dict]:
    msg = tune_pb2.TuneProto()
    try:
        text_format.Parse(text, msg)
    except text_format.ParseError as exc:
        err = _parse_error(exc, path)
        if err.help and err.help.startswith("job.conf is protobuf"):
            err.help = (
                "a space file is protobuf text format, like job.conf: `field: value` and "
                f"`message {{ ... }}`, e.g. {_EXAMPLE}"
            )
        raise err from None
    return msg, index_locations(text)


def read_space(path: str | Path) -> tuple[str, tune_pb2.TuneProto, dict]:
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise SingaError(
            f"search space file not found: {path}",
            where=str(path),
            help=f"give the path of a space file beside job.conf, e.g. one line: {_EXAMPLE}",
        ) from None
    except IsADirectoryError:
        raise SingaError(
            f"{path} is a directory, not a search space file",
            where=str(path),
            help="give the path of the space file inside it",
        ) from None
    except OSError as exc:
        raise SingaError(
            f"cannot read {path}: {exc.strerror or exc}", where=str(path), help="check the path"
        ) from None
    if len(raw) > MAX_SPACE_BYTES:
        raise SingaError(
            f"{path} is {len(raw):,} bytes; a space file is at most {MAX_SPACE_BYTES:,}",
            where=str(path),
            help="a space file names a few fields and their ranges",
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        col = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise SingaError(
            f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})",
            where=Location(str(path), line, col),
            help="a space file is protobuf text format (UTF-8)",
        ) from None
    msg, locations = parse_space_text(text, str(path))
    return text, msg, locations


# -- checking ------------------------------------------------------------------------------
class _Where:
    """Locations in the space file by field path."""

    def __init__(self, path: str, locations: dict) -> None:
        self.path, self.locations = path, locations

    def __call__(self, key: tuple) -> Location:
        while key:
            if key in self.locations:
                return Location(self.path, *self.locations[key])
            key = key[:-2]
        return Location(self.path)


def _copy_cfg(cfg: JobConfig) -> JobConfig:
    job = type(cfg.job)()
    job.CopyFrom(cfg.job)
    return replace(cfg, job=job, overrides=list(cfg.overrides), overridden=dict(cfg.overridden))


def resolve_field(job, path: str, where: Location) -> FieldDescriptor:
    """The descriptor of the scalar field ``path`` names in ``job`` (as ``-o`` reads the
    path), or a SingaError at ``where``."""
    parts = _split_path(path.strip())
    if not parts:
        raise SingaError("the field path is empty", where=where, help=_EXAMPLE)
    msg = job
    for depth, part in enumerate(parts):
        m = _PATH_PART.fullmatch(part)
        if not m:
            raise SingaError(
                f"bad field path {path!r}",
                where=where,
                help="names separated by dots, as -o takes them: e.g. updater.momentum or "
                "neuralnet.layer[2].innerproduct_conf.num_output",
            )
        name, index = m.group(1), m.group(2)
        try:
            fd = (
                _extension_field(msg, name[1:-1].strip(), str(where))
                if name.startswith("[")
                else msg.DESCRIPTOR.fields_by_name.get(name)
            )
        except SingaError as err:
            raise SingaError(err.message, where=where, help=err.help) from None
        if fd is None:
            names = list(msg.DESCRIPTOR.fields_by_name)
            raise SingaError(
                f'{msg.DESCRIPTOR.name} has no field "{name}" (in {path})',
                where=where,
                help=did_you_mean(name, names) or f"its fields: {', '.join(sorted(names))}",
            )
        last = depth == len(parts) - 1
        if fd.message_type is not None:
            if last:
                raise SingaError(
                    f'"{path}" is a message; vary one of its fields',
                    where=where,
                    help=f'e.g. field: "{path}.FIELD"',
                )
            value = msg.Extensions[fd] if fd.is_extension else getattr(msg, fd.name)
            if fd.is_repeated:
                i = int(index or 0)
                if i >= len(value):
                    raise SingaError(
                        f"{'.'.join(parts[: depth + 1])}: index {i} out of range (job.conf "
                        f"has {len(value)} {name} entries)",
                        where=where,
                        help="indices start at 0 and count the entries in job.conf's order",
                    )
                value = value[i]
            msg = value
            continue
        if not last:
            raise SingaError(
                f'"{name}" is not a message (in {path})',
                where=where,
                help="only a message's fields take a further .name; end the path at this field",
            )
        return fd
    raise AssertionError("unreachable")


def _type_text(fd: FieldDescriptor) -> str:
    if fd.enum_type is not None:
        return f"an enum ({fd.enum_type.name}: {', '.join(v.name for v in fd.enum_type.values)})"
    if fd.type == FieldDescriptor.TYPE_BOOL:
        return "true or false"
    if fd.type in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES):
        return "text"
    return "a whole number" if fd.type not in _FLOATS else "a real number"


def _dimension(p, i: int, where: _Where, job) -> Dimension:
    base = ("param", i)
    kind = p.WhichOneof("distribution")
    field_where = where(base + ("field", 0))
    if not p.HasField("field") or not p.field.strip():
        raise SingaError("this param names no field", where=where(base), help=f"e.g. {_EXAMPLE}")
    if kind is None:
        raise SingaError(
            f"param {p.field!r} has no distribution",
            where=where(base),
            help="give one of choice { value: ... }, uniform { low: ... high: ... }, "
            "log_uniform { ... }, int { ... }, int_log_uniform { ... }",
        )
    for path, why in _STUDY_SETS.items():
        if p.field.strip() == path:
            raise SingaError(
                f"{path} cannot be varied: {why}",
                where=field_where,
                help="leave it out of the space; the study sets it for every trial",
            )
    fd = resolve_field(job, p.field, field_where)
    numeric = fd.cpp_type in (
        fd.CPPTYPE_INT32, fd.CPPTYPE_INT64, fd.CPPTYPE_UINT32, fd.CPPTYPE_UINT64,
        fd.CPPTYPE_FLOAT, fd.CPPTYPE_DOUBLE,
    ) and fd.enum_type is None  # fmt: skip
    is_int = numeric and fd.type not in _FLOATS
    dist = getattr(p, kind)
    dist_where = where(base + (kind, 0))
    dim = Dimension(p.field.strip(), kind, integer_field=is_int, where=field_where)
    if kind == "choice":
        if not dist.value:
            raise SingaError(
                f"the choice for {p.field} has no value", where=dist_where,
                help='list the values, e.g. choice { value: "kSGD" value: "kNesterov" }',
            )  # fmt: skip
        if len(set(dist.value)) != len(dist.value):
            twice = next(v for v in dist.value if list(dist.value).count(v) > 1)
            k = [j for j, v in enumerate(dist.value) if v == twice][1]
            raise SingaError(
                f"the choice for {p.field} lists {twice!r} twice",
                where=where(base + (kind, 0, "value", k)), help="list each value once",
            )  # fmt: skip
        dim.choices = list(dist.value)
        return dim
    if not numeric:
        raise SingaError(
            f"{p.field} is {_type_text(fd)}: a {kind} range does not fit it",
            where=dist_where,
            help='vary it with choice { value: "..." value: "..." }'
            + (
                f" (values: {', '.join(v.name for v in fd.enum_type.values)})"
                if fd.enum_type is not None
                else ""
            ),
        )
    if kind in ("uniform", "log_uniform") and is_int:
        whole = "int_log_uniform" if kind == "log_uniform" else "int"
        raise SingaError(
            f"{p.field} is a whole number: a real {kind} range does not fit it",
            where=dist_where,
            help=f"use {whole} {{ low: ... high: ... }}",
        )
    for bound in ("low", "high"):
        if not dist.HasField(bound):
            raise SingaError(
                f"the {kind} range of {p.field} has no {bound}",
                where=dist_where,
                help=f"give both bounds: {kind} {{ low: ... high: ... }}",
            )
    low, high = dist.low, dist.high
    low_where, high_where = where(base + (kind, 0, "low", 0)), where(base + (kind, 0, "high", 0))
    for value, at in ((low, low_where), (high, high_where)):
        if isinstance(value, float) and not math.isfinite(value):
            raise SingaError(f"a bound of {p.field} is {value}", where=at, help="give a number")
    if not low < high:
        raise SingaError(
            f"the range of {p.field} is empty or reversed: low {low:g} is not below high {high:g}",
            where=high_where,
            help="give low < high (to fix a field at one value, set it in job.conf)",
        )
    if kind == "log_uniform" and low <= 0:
        raise SingaError(
            f"a log-uniform range starts above 0; low is {low:g}",
            where=low_where,
            help="give low > 0 (e.g. 1e-5), or use uniform { ... } for a range from 0",
        )
    if kind == "int_log_uniform" and low < 1:
        raise SingaError(
            f"an int_log_uniform range starts at 1 or more; low is {low}",
            where=low_where,
            help="give low >= 1, or use int { ... } for a range from 0",
        )
    dim.low, dim.high = low, high
    if dist.HasField("step"):
        step_where = where(base + (kind, 0, "step", 0))
        if kind in ("log_uniform", "int_log_uniform"):
            if kind == "log_uniform" or dist.step != 1:
                raise SingaError(
                    f"a {kind} range takes no step", where=step_where, help="leave step out"
                )
        elif not dist.step > 0:
            raise SingaError(
                f"the step of {p.field} is {dist.step:g}", where=step_where, help="give step > 0"
            )
        else:
            n = (high - low) / dist.step
            if abs(n - round(n)) > 1e-9 * max(1.0, abs(n)):
                raise SingaError(
                    f"the step {dist.step:g} does not divide the range {low:g} to {high:g}",
                    where=step_where,
                    help=f"make high - low a multiple of the step (e.g. high: "
                    f"{low + math.floor(n) * dist.step:g})",
                )
            dim.step = dist.step
    return dim


def _apply(cfg: JobConfig, dim: Dimension, value, at: Location) -> None:
    """Set ``dim``'s field to ``value`` in ``cfg``; a value the field cannot take is an
    error at ``at``. Later errors about the field point at ``at`` too."""
    try:
        apply_override(cfg, dim.override(value))
    except SingaError as err:
        raise SingaError(
            f"{dim.field} cannot be {dim.text(value)}: {err.message}",
            where=at,
            help=err.help,
        ) from None
    cfg.overridden[parse_field_path(dim.field)] = str(at)


def _objective(o, where: _Where, job, locate_job) -> Objective:
    metric = o.metric.strip()
    if not metric:
        raise SingaError(
            "the objective names no metric",
            where=where(("objective", 0, "metric", 0)),
            help='e.g. objective { metric: "accuracy" } (or "loss", or any metric a layer reports)',
        )
    phase = "validation" if o.phase == tune_pb2.Objective.VALIDATION else "test"
    steps = job.validate_steps if phase == "validation" else job.test_steps
    if steps <= 0:
        field_name = "validate_steps" if phase == "validation" else "test_steps"
        raise SingaError(
            f"the objective is a {phase} metric, and the job has no {phase} passes "
            f"({field_name} is {steps})",
            where=where(("objective", 0, "phase", 0))
            if o.HasField("phase")
            else where(("objective", 0)),
            help=f"set {field_name} (and {phase[:4] if phase == 'test' else 'validate'}_freq) "
            f"in job.conf ({locate_job(field_name)})",
        )
    if o.direction == tune_pb2.Objective.AUTO:
        low = metric.lower()
        maximize = not ("loss" in low or "error" in low or "perplexity" in low)
    else:
        maximize = o.direction == tune_pb2.Objective.MAXIMIZE
    at = "best" if o.at == tune_pb2.Objective.BEST else "last"
    return Objective(metric, phase, at, maximize)


def _positive(msg, name: str, where: _Where, key: tuple, low=1, what="") -> None:
    if msg.HasField(name) and not getattr(msg, name) >= low:
        raise SingaError(
            f"{name} is {getattr(msg, name):g}; it must be at least {low:g}{what}",
            where=where(key + (name, 0)),
            help=f"e.g. {name}: {max(low, 3):g}" if low else f"e.g. {name}: 1",
        )


def check_space(
    msg: tune_pb2.TuneProto, text: str, path: str, locations: dict, cfg: JobConfig
) -> SearchSpace:
    """Check a parsed space against the job (see the module docstring); no prepare_job."""
    where = _Where(path, locations)
    if not msg.param:
        raise SingaError(
            "the space names no field to vary",
            where=Location(path),
            help=f"add a line such as {_EXAMPLE}",
        )
    dims: list[Dimension] = []
    seen: dict[str, int] = {}
    for i, p in enumerate(msg.param):
        dim = _dimension(p, i, where, cfg.job)
        key = parse_field_path(dim.field)
        if key in seen:
            raise SingaError(
                f"{dim.field} is varied twice (also by param {seen[key]})",
                where=dim.where,
                help="give each field one param",
            )
        seen[key] = i
        dims.append(dim)
    budget, b = msg.budget, ("budget", 0)
    _positive(budget, "trials", where, b)
    _positive(budget, "train_steps", where, b)
    for name in ("trial_seconds", "study_seconds"):
        _positive(budget, name, where, b, low=1e-9, what=" (seconds)")
    if budget.HasField("train_steps") and parse_field_path("train_steps") in seen:
        raise SingaError(
            "train_steps is both varied and set by the budget",
            where=where(b + ("train_steps", 0)),
            help="leave budget.train_steps out, or stop varying train_steps",
        )
    stop, s = msg.early_stopping, ("early_stopping", 0)
    _positive(stop, "min_steps", where, s, low=0)
    _positive(stop, "startup_trials", where, s, low=0)
    _positive(stop, "reduction_factor", where, s, low=2)
    _positive(msg.sampler, "startup_trials", where, ("sampler", 0), low=0)
    objective = _objective(msg.objective, where, cfg.job, cfg.locate)
    rule = {
        tune_pb2.EarlyStopping.MEDIAN: "median",
        tune_pb2.EarlyStopping.ASHA: "asha",
        tune_pb2.EarlyStopping.HYPERBAND: "hyperband",
        tune_pb2.EarlyStopping.NONE: "none",
    }[stop.rule]
    trials = int(budget.trials)
    startup = (
        int(msg.sampler.startup_trials)
        if msg.sampler.HasField("startup_trials")
        else max(2, min(10, trials // 3))
    )
    first_pass = cfg.job.validate_freq if objective.phase == "validation" else cfg.job.test_freq
    return SearchSpace(
        path=path,
        text=text,
        proto=msg,
        dims=dims,
        objective=objective,
        trials=trials,
        train_steps=int(budget.train_steps) if budget.HasField("train_steps") else None,
        trial_seconds=budget.trial_seconds if budget.HasField("trial_seconds") else None,
        study_seconds=budget.study_seconds if budget.HasField("study_seconds") else None,
        sampler="random" if msg.sampler.kind == tune_pb2.Sampler.RANDOM else "tpe",
        sampler_startup=startup,
        stopping=rule,
        min_steps=int(stop.min_steps) if stop.HasField("min_steps") else max(first_pass, 1),
        stopping_startup=int(stop.startup_trials),
        reduction_factor=int(stop.reduction_factor),
        locations=locations,
    )


def corners(space: SearchSpace, cfg: JobConfig) -> list[JobConfig]:
    """The job with every field at its lowest value, and at its highest (a choice's first
    and last value), each value checked as ``-o`` checks it; every choice value is checked
    too. Errors about a field set here point at its bound in the space file."""
    where = _Where(space.path, space.locations)
    out = []
    for end in ("low", "high"):
        c = _copy_cfg(cfg)
        if space.train_steps is not None:
            apply_override(c, f"train_steps={space.train_steps}")
            c.overridden[parse_field_path("train_steps")] = str(
                where(("budget", 0, "train_steps", 0))
            )
        for i, dim in enumerate(space.dims):
            if dim.kind == "choice":
                for k, value in enumerate(dim.choices):
                    at = where(("param", i, "choice", 0, "value", k))
                    _apply(_copy_cfg(cfg), dim, value, at)  # each value on its own
                k = 0 if end == "low" else len(dim.choices) - 1
                _apply(c, dim, dim.choices[k], where(("param", i, "choice", 0, "value", k)))
            else:
                value = dim.low if end == "low" else dim.high
                _apply(c, dim, value, where(("param", i, dim.kind, 0, end, 0)))
        out.append(c)
    return out


def load_space(path: str | Path, cfg: JobConfig, host=None, workspace: str | None = None):
    """Read, parse and check the space file against ``cfg`` (the job.conf, loaded); with a
    plugin ``host``, also prepare the job at the space's two corners (``prepare_job``, in
    ``workspace``), so a job that cannot run is an error before trial 0."""
    text, msg, locations = read_space(path)
    space = check_space(msg, text, str(path), locations, cfg)
    ends = corners(space, cfg)
    from singa_core.jobconf.limits import check_limits

    for c in ends:
        check_limits(c)
    if host is not None:
        from singa_core.running.job import prepare_job

        for c in ends:
            prepare_job(c, host, seed=0, workspace=workspace)
    return space
