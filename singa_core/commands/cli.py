"""The ``singa`` command line.

User errors (:class:`~singa_core.contracts.errors.SingaError`) are printed as ``WHERE: error: WHAT``
plus a ``help:`` line and exit with status 2, without a traceback.
"""

from __future__ import annotations

import sys

from singa_core.commands.startup import quiet_interrupts, restore_interrupts

with quiet_interrupts():  # Ctrl-C while the command line loads: "interrupted", exit 130
    import contextlib
    import errno
    import json
    import os
    from pathlib import Path
    from typing import Annotated

    import typer
    from typer.core import TyperCommand, TyperGroup

    from singa_core.commands import jobs as _jobs_commands
    from singa_core.commands import tune as _tune_commands
    from singa_core.commands.override_words import override_word_error
    from singa_core.contracts.errors import USER_ERROR_EXIT, SingaError
    from singa_core.contracts.version import __version__


class _Command(TyperCommand):
    """Plain help, as a well-kept CLI prints it: ``singa train [OPTIONS] JOB.conf``, arguments
    by their metavar (no ``{job}`` or ``<path>``), options with their value's metavar, the
    examples in the epilog kept as written."""

    def parse_args(self, ctx, args):
        if any(p.name == "override" for p in self.params):
            _check_override_words(list(args))  # before click's "unexpected extra argument"
        with _usage_errors_located(ctx):
            return super().parse_args(ctx, args)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except SingaError as err:  # a command that does not catch its own: the one form too
            _fail(err)

    def collect_usage_pieces(self, ctx) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if param.param_type_name == "argument":
                name = _argument_name(param)
                pieces.append(name if param.required else f"[{name}]")
        return pieces

    def format_options(self, ctx, formatter) -> None:
        args, opts = [], []
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if param.param_type_name == "argument":
                text = record[1].replace("[required]", "").rstrip()  # it is an argument
                args.append((_argument_name(param), text))
            else:
                opts.append(record)
        if args:
            with formatter.section("Arguments"):
                formatter.write_dl(args)
        if opts:
            with formatter.section("Options"):
                formatter.write_dl(opts)

    def format_epilog(self, ctx, formatter) -> None:
        _write_epilog(self.epilog, formatter)


class _Group(TyperGroup):
    """The command list with each command's whole first line; the epilog as written."""

    def format_commands(self, ctx, formatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit=200)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def format_epilog(self, ctx, formatter) -> None:
        _write_epilog(self.epilog, formatter)

    def parse_args(self, ctx, args):
        ctx.meta.setdefault("singa.argv", list(args))  # to name the argument of an OSError
        with _usage_errors_located(ctx):
            return super().parse_args(ctx, args)

    def resolve_command(self, ctx, args):
        with _usage_errors_located(ctx):  # "No such command"
            return super().resolve_command(ctx, args)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:  # typer makes it a silent exit 130: say it, in one line
            print("interrupted", file=sys.stderr)
            raise
        except OSError as exc:
            if exc.errno != errno.ENAMETOOLONG:
                raise
            _fail(name_too_long(exc, ctx.meta.get("singa.argv", [])))


@contextlib.contextmanager
def _usage_errors_located(ctx):
    """click's own usage errors (a missing option or argument, an unknown option or
    command, a value of the wrong type) in singa's one form: ``singa data --out: error:
    missing option '--out'`` and a ``help:`` line, exit 2, instead of click's ``Usage: ...
    / Try ... / Error: ...`` block."""
    click = _click_exceptions()
    try:
        yield
    except click.NoArgsIsHelpError:
        raise  # `singa` alone: the help, as asked for
    except click.UsageError as exc:
        _fail(usage_error(exc, ctx))


def _command_path(ctx) -> str:
    """``singa data``: the command as typed (whatever name the program was started as)."""
    if ctx is None:
        return "singa"
    return " ".join(["singa", *ctx.command_path.split(" ")[1:]])


def _click_exceptions():
    return _click_module("exceptions")


def _click_module(name: str):
    """A module of the click typer runs on (typer 0.2x vendors its own copy,
    ``typer._click``; earlier ones use click itself)."""
    import importlib

    package = TyperCommand.__mro__[1].__module__.rsplit(".", 1)[0]
    return importlib.import_module(f"{package}.{name}")


def usage_error(exc, ctx=None) -> SingaError:
    """The :class:`SingaError` of a click usage error: located at the command and the
    option or argument it is about (``singa predict --top-k``), else at the command."""
    click = _click_exceptions()
    ctx = exc.ctx or ctx
    command = _command_path(ctx)
    name = None
    if isinstance(exc, (click.NoSuchOption, click.BadOptionUsage)):
        name = exc.option_name
    elif getattr(exc, "param", None) is not None:
        param = exc.param
        if param.param_type_name == "argument":
            name = _argument_name(param)
        else:
            name = max(param.opts, key=len) if param.opts else param.name
    what = exc.format_message().strip().rstrip(".") or "bad command line"
    what = what[0].lower() + what[1:]
    if isinstance(exc, click.NoSuchOption) and exc.possibilities:
        what = exc.message.strip().rstrip(".")
        what = what[0].lower() + what[1:]
        hint = "did you mean " + " or ".join(exc.possibilities) + "?"
    elif command == "singa" and "no such command" in what:
        what, _, guess = what.partition(". Did you mean ")
        hint = f"did you mean {guess}" if guess else "`singa -h` lists the commands"
    else:
        hint = f"`{command} -h` shows its arguments and options"
    return SingaError(what, where=f"{command} {name}" if name else command, help=hint)


def _shown_name(name: str) -> str:
    """A name the filesystem refuses, shortened for a message: its start and its length."""
    size = len(os.fsencode(name))
    return name if len(name) <= 60 else f"{name[:40]}… ({size} bytes)"


def name_too_long(exc: OSError, argv: list[str]) -> SingaError:
    """A located user error for ``File name too long`` (ENAMETOOLONG), wherever a command
    met it: at the option (or argument) of the command line whose value holds the long
    name, else at the path the filesystem refused."""
    path = os.fsdecode(exc.filename) if exc.filename is not None else ""
    parts = [p for p in path.split(os.sep) if len(os.fsencode(p)) > NAME_MAX]
    long = parts[0] if parts else path
    where, flag = _shown_name(path) if path else "command line", None
    for i, arg in enumerate(argv):
        if long and long in arg:
            flag = arg.split("=", 1)[0] if arg.startswith("-") and "=" in arg else None
            if flag is None and i > 0 and argv[i - 1].startswith("-"):
                flag = argv[i - 1]
            where = flag or _shown_name(arg)
            break
    if flag is not None:  # where names the option: the message shows the name
        what = f"the name {_shown_name(long)}" if parts else f"the path {_shown_name(path)}"
    else:  # where shows the name already
        size = len(os.fsencode(long))
        what = f"a name of {size} bytes" if parts else f"a path of {size} bytes"
    return SingaError(
        f"{what} is too long for the filesystem",
        where=where,
        help=f"use names of at most {NAME_MAX} bytes per folder or file "
        f"(and at most {PATH_MAX} bytes in all)",
    )


def _check_override_words(args: list[str]) -> None:
    err = override_word_error(args)
    if err is not None:
        _fail(err)


def _argument_name(param) -> str:
    name = param.metavar or param.name.upper()
    return name + "..." if param.nargs != 1 and not name.endswith("...") else name


def _write_epilog(epilog: str | None, formatter) -> None:
    """The epilog line by line: a heading, then examples indented as written."""
    if not epilog:
        return
    formatter.write_paragraph()
    for line in epilog.strip("\n").splitlines():
        formatter.write(f"{'':>{formatter.current_indent}}{line}\n")


class _App(typer.Typer):
    """Every command gets :class:`_Command`'s help."""

    def command(self, *args, cls=None, **kwargs):
        return super().command(*args, cls=cls or _Command, **kwargs)


app = _App(
    cls=_Group,
    add_completion=False,
    rich_markup_mode=None,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="singa: train SINGA 0.x job.conf files; extend it with pip-installable plugins.",
    epilog="""Examples:
  singa data mnist --out examples/mnist
  singa train examples/mnist/job.conf
  singa test examples/mnist/job.conf --steps 100
  singa COMMAND --help""",
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)

JobArg = Annotated[
    Path,
    typer.Argument(metavar="JOB.conf", help="the job.conf file (protobuf text format)"),
]
OverrideOpt = Annotated[
    list[str] | None,
    typer.Option(
        "-o",
        "--override",
        metavar="FIELD=VALUE",
        help="set a field, e.g. -o train_steps=100 (repeatable)",
    ),
]
WorkspaceOpt = Annotated[str | None, typer.Option(metavar="DIR", help="override cluster.workspace")]
DeviceOpt = Annotated[
    str | None,
    typer.Option(
        "--device",  # named: typer 0.27 takes a metavar equal to the name for the name
        metavar="DEVICE",
        help="where every worker computes: cpu, cuda (= cuda:0), cuda:N (needs "
        "singa-classic[gpu]; gpu, gpu:N are the same), standin (the CPU through the "
        "stand-in device module, for checking plugins) or standin:cuda (the same, the "
        "kernels' CUDA code emulated); default: job.conf's gpu field "
        "(worker i on gpu[i], the others on the CPU)",
    ),
]
SampleShapeOpt = Annotated[
    list[int] | None,
    typer.Option(
        "--sample-shape",
        metavar="N",
        help="the shape of one raw sample, repeatable (e.g. --sample-shape 28 --sample-shape "
        "28), for 0.1-style parser layers (kMnist, kRGBImage) that learn it from records",
    ),
]


NAME_MAX, PATH_MAX = 255, 4096  # Linux's limits: one name, a whole path (bytes)


def _at_least(option: str, value, low: int, what: str, example: str) -> None:
    """Refuse a numeric option (or any value of a repeatable one) below ``low``: a negative
    count is never taken as the nearest sensible one."""
    bound = "0 or more" if low == 0 else f"at least {low}"
    for v in value if isinstance(value, list) else [value]:
        if v is not None and v < low:
            _fail(
                SingaError(
                    f"{option} is {v}; it must be {bound} ({what})",
                    where=option,
                    help=f"e.g. {example}",
                )
            )


def _sample_shape_agrees(model, given: list[int] | None) -> None:
    """--sample-shape is what 0.1-style parser layers learn from records; a data layer that
    knows its shape (store_conf.shape) must be given the same one, or none."""
    if given and tuple(given) != tuple(model.sample_shape):
        shape = " ".join(f"--sample-shape {s}" for s in model.sample_shape)
        raise SingaError(
            f"--sample-shape {list(given)} is not the data layer's sample shape "
            f"{list(model.sample_shape)}",
            where="--sample-shape",
            help=f"leave --sample-shape out (the data layer knows its shape), or give {shape}",
        )


def _fail(err: SingaError) -> None:
    """Print a user error in the one form (``WHERE: error: WHAT``, ``help:``) and exit 2
    (3 for a non-finite stop). An error that names no place is located at the command that
    met it (``singa train``); one without help points at the command's ``-h``."""
    _complete(err)
    print(err.format(), file=sys.stderr)
    raise typer.Exit(getattr(err, "exit_code", USER_ERROR_EXIT))  # 3: numeric.NonFiniteError


def _complete(err: SingaError) -> SingaError:
    command = _command_path(_click_module("globals").get_current_context(silent=True))
    if err.where is None:
        err.where = command
    if not err.help:
        err.help = f"`{command} -h` shows its arguments and options"
    return err


def _host():
    from singa_core.plugin_host.host import get_host

    host = get_host()
    for f in host.failures:
        print(f.warning(), file=sys.stderr)
    return host


def select_engine(host, job, name: str | None):
    """The engine class to run ``job`` (see singa_core.api.job.select_engine)."""
    from singa_core.api.job import select_engine as choose

    return choose(host, job, name)


def _print_net(prepared, engine) -> None:
    from singa_core.contracts.layer import kTrain
    from singa_core.netbuilder.net import PHASE_NAMES

    for phase, net in prepared.nets.items():
        rows = net.summary()
        print(f"{PHASE_NAMES[phase]} net ({len(rows)} layers):")
        w = max(len(r[0]) for r in rows)
        t = max(len(r[1]) for r in rows)
        for name, typ, srcs, shape, nparams in rows:
            shape_s = "x".join(str(s) for s in shape) if shape else "-"
            print(
                f"  {name:<{w}}  {typ:<{t}}  <- {', '.join(srcs) or '(none)':<20} "
                f"out {shape_s:<14} params {nparams:,}"
            )
        if phase == kTrain:
            print(
                f"  total: {net.num_param_values():,} parameter values in "
                f"{len(net.owner_params)} params"
            )
    if prepared.memory is not None:
        for line in prepared.memory.table():
            print(line)
    for line in engine.describe():
        print(line)
    for line in prepared.device_lines():
        print(line)


def _print_deploy_net(run) -> None:
    """The deploy net as the dry-run prints the others; N is any batch size."""
    from singa_core.contracts.layer import kDeploy
    from singa_core.netbuilder.net import NeuralNet

    plan = run.deploy_plan()
    net = NeuralNet.create(
        plan.job,
        kDeploy,
        get_plugin=run.host.get,
        locate=plan.locate,
        init_params=False,
        batchsize=1,
    )
    rows = net.summary()
    print(f"kDeploy net ({len(rows)} layers, batch N):")
    w = max(len(r[0]) for r in rows)
    t = max(len(r[1]) for r in rows)
    for name, typ, srcs, shape, nparams in rows:
        shape_s = "x".join(["N", *map(str, shape[1:])]) if shape else "-"
        print(
            f"  {name:<{w}}  {typ:<{t}}  <- {', '.join(srcs) or '(none)':<20} "
            f"out {shape_s:<14} params {nparams:,}"
        )
    for line in plan.describe():
        print(f"  {line}")


def _write_graph(prepared, engine, path: Path, job: Path) -> None:
    from singa_core.commands.graph import net_graph, write_graph
    from singa_core.netbuilder.net import PHASE_NAMES

    title = f"{prepared.job.name or job.stem} ({job})"
    text = net_graph(prepared.nets, PHASE_NAMES, engine.describe(), title)
    written, note = write_graph(text, path)
    if note:
        print(note, file=sys.stderr)
    print(f"wrote {written}")


def _engine_options(*, extra: list[str], **given) -> dict[str, str]:
    """The engine options given on the command line (name -> text)."""
    out = {k: str(v) for k, v in given.items() if v is not None}
    for item in extra:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SingaError(
                f"engine option {item!r} is not KEY=VALUE",
                where="--engine-option",
                help="e.g. --engine-option cpus_per_worker=0.5",
            )
        out[key.strip().replace("-", "_")] = value.strip()
    return out


@app.command(
    epilog="""Examples:
  singa train examples/mnist/job.conf
  singa train examples/mnist/job.conf -o train_steps=200 --seed 1 --workspace /tmp/run1
  singa train examples/mnist/job.conf --dry-run
  singa train examples/mnist/job.conf --resume"""
)
def train(
    job: JobArg,
    resume: Annotated[
        bool, typer.Option("--resume", help="continue from the newest checkpoint in the workspace")
    ] = False,
    resume_from: Annotated[
        int | None,
        typer.Option(
            "--resume-from",
            metavar="STEP",
            help="continue from the workspace's checkpoint of step STEP (e.g. when the newest "
            "is damaged)",
        ),
    ] = None,
    keep_checkpoints: Annotated[
        int | None,
        typer.Option(
            "--keep-checkpoints",
            metavar="N",
            help="keep only the N newest checkpoints (plus those marked with "
            "checkpoint/step<S>.keep); same as -o keep_checkpoints=N",
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="validate and print the net; do not train")
    ] = False,
    override: OverrideOpt = None,
    seed: Annotated[
        int | None,
        typer.Option(metavar="N", help="job-level random seed (overrides job.conf's seed)"),
    ] = None,
    engine: Annotated[
        str | None,
        typer.Option(
            metavar="NAME",
            help="engine plugin to run the job (default: chosen from the cluster config)",
        ),
    ] = None,
    workspace: WorkspaceOpt = None,
    device: DeviceOpt = None,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="no metric lines, only the summary")
    ] = False,
    address: Annotated[
        str | None,
        typer.Option(
            metavar="HOST:PORT",
            help="engines that run on a cluster: the cluster to join, HOST:PORT or auto "
            "(default: the engine's own, e.g. a private one-node runtime)",
        ),
    ] = None,
    placement: Annotated[
        str | None,
        typer.Option(
            metavar="group|spread|pack",
            help="engines that run on a cluster: group (default: each worker group with its "
            "servers on one node), spread (a process on every node first) or pack (fill "
            "nodes in order)",
        ),
    ] = None,
    max_restarts: Annotated[
        int | None,
        typer.Option(
            metavar="N",
            help="engines that run on a cluster: restart from the newest checkpoint up to N "
            "times when a process or node is lost (default 0: stop)",
        ),
    ] = None,
    insecure: Annotated[
        bool,
        typer.Option(
            "--insecure",
            help="engines that run on a cluster: also join a cluster that checks no tokens "
            "(anyone who reaches its ports can run code on its nodes)",
        ),
    ] = False,
    startup_timeout: Annotated[
        str | None,
        typer.Option(
            "--startup-timeout",
            metavar="SECONDS",
            help="engines that run on a cluster: stop when start-up (the node checks, the "
            "processes, every worker's net) has not finished within SECONDS (default 60)",
        ),
    ] = None,
    engine_option: Annotated[
        list[str] | None,
        typer.Option(
            "--engine-option",
            metavar="KEY=VALUE",
            help="an engine's own option KEY=VALUE (repeatable)",
        ),
    ] = None,
    tensorboard: Annotated[
        bool,
        typer.Option(
            "--tensorboard/--no-tensorboard",
            show_default=False,
            help="write TensorBoard event files to WORKSPACE/tensorboard/ (default on; needs "
            "singa-classic[tensorboard])",
        ),
    ] = True,
    histograms: Annotated[
        bool,
        typer.Option(
            "--histograms",
            help="also write each Param's and its gradient's histogram to TensorBoard every "
            "disp_freq steps",
        ),
    ] = False,
    deploy: Annotated[
        bool,
        typer.Option(
            "--deploy",
            help="with --dry-run: also print the deploy net (the net predict and export use)",
        ),
    ] = False,
    graph: Annotated[
        Path | None,
        typer.Option(
            "--graph",
            metavar="FILE",
            help="with --dry-run: write the nets (after unrolling and partitioning) and the "
            "placement as a Graphviz graph, FILE.dot (or .svg/.png/.pdf when Graphviz's dot "
            "is installed)",
        ),
    ] = None,
) -> None:
    """Train the model a job.conf describes.

    Prints SINGA-style metric lines, writes checkpoints, WORKSPACE/metrics.jsonl and
    TensorBoard event files, and ends with the wall time and where it went. Ctrl-C stops
    after the current step with a checkpoint (exit 130); --resume continues."""
    from singa_core.api.job import Job

    _at_least("--resume-from", resume_from, 0, "a checkpoint's step", "--resume-from 1000")
    _at_least(
        "--keep-checkpoints", keep_checkpoints, 0, "a number, 0 for all", "--keep-checkpoints 5"
    )
    if keep_checkpoints is not None:
        override = [*(override or []), f"keep_checkpoints={keep_checkpoints}"]
    if graph is not None and not dry_run:
        _fail(
            SingaError(
                "--graph writes the net of a dry run",
                where="--graph",
                help=f"add --dry-run: singa train {job} --dry-run --graph {graph}",
            )
        )
    try:
        run = Job.from_file(
            job,
            override,
            seed=seed,
            workspace=workspace,
            engine=engine,
            engine_options=_engine_options(
                address=address,
                placement=placement,
                max_restarts=max_restarts,
                insecure=True if insecure else None,
                startup_timeout=startup_timeout,
                extra=engine_option or [],
            ),
            quiet=quiet,
            tensorboard=tensorboard,
            histograms=histograms,
            device=device,
        )
        if dry_run:
            checked = run.dry_run()
            prepared, eng = checked.prepared, checked.engine
            _print_net(prepared, eng)
            if deploy:
                _print_deploy_net(run)
            if graph is not None:
                _write_graph(prepared, eng, graph, job)
            print(f"{job}: ok")
            return
        result = run.train(resume=resume, resume_from=resume_from)
    except SingaError as err:
        _fail(err)
    if not result.trained:
        return
    print(result.summary(), file=sys.stderr)
    if result.interrupted:
        raise typer.Exit(128 + (result.stop_signal or 2))  # 130 for Ctrl-C, 143 for SIGTERM


@app.command(
    epilog="""Examples:
  singa test examples/mnist/job.conf --steps 100
  singa test examples/mnist/job.conf --checkpoint examples/mnist/checkpoint/step600-worker0
  singa test examples/char-rnn/sample.conf --steps 600"""
)
def test(
    job: JobArg,
    override: OverrideOpt = None,
    steps: Annotated[
        int | None, typer.Option(metavar="N", help="test mini-batches (default: test_steps)")
    ] = None,
    checkpoint: Annotated[
        list[Path] | None,
        typer.Option(
            metavar="FILE",
            help="checkpoint file(s) to load, repeatable (default: the newest in the workspace, "
            "else checkpoint_path)",
        ),
    ] = None,
    engine: Annotated[
        str | None,
        typer.Option(
            metavar="NAME", help="engine plugin (default: chosen from the cluster config)"
        ),
    ] = None,
    device: DeviceOpt = None,
    seed: Annotated[
        int | None,
        typer.Option(
            metavar="N",
            help="random seed of the test pass (overrides job.conf's seed): a store's "
            "random_skip, dropout at test time ... repeat with the same N",
        ),
    ] = None,
) -> None:
    """Evaluate a trained model on the test net (SINGA's -test).

    Loads the checkpoint of the job's workspace that `singa train --resume` would continue
    from (else job.conf's checkpoint_path) and prints the test net's metrics over N
    mini-batches. A job.conf without an updater (e.g. a sampling job) is fine."""
    from singa_core.api.job import Job

    _at_least("--steps", steps, 1, "a number of test mini-batches", "--steps 100")
    try:
        run = Job.from_file(job, override, engine=engine, device=device, seed=seed)
        result = run.test(steps, checkpoint)
    except SingaError as err:
        _fail(err)
    for info in result.checkpoint_info:  # which model: path, step, when, which run
        print(f"checkpoint: {info}", file=sys.stderr)
    for note in result.checkpoint_notes:
        print(note, file=sys.stderr)
    print(result.summary())


@app.command(
    "list-plugins",
    epilog="""Examples:
  singa list-plugins
  singa list-plugins --json""",
)
def list_plugins(
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="show import tracebacks")
    ] = False,
) -> None:
    """Show every plugin distribution, its version and the types it provides.

    Each type is listed under the job.conf field that selects it (`type` for the built-in
    enum names, `user_type` for user types, ...); a name two plugins claim is listed under
    every provider and marked (conflict)."""
    from singa_core.contracts.version import CORE_DISTRIBUTION, PLUGIN_API_VERSION
    from singa_core.plugin_host.host import get_host

    host = get_host()
    # (dist, version) -> kind -> selecting field -> labels
    dists: dict[tuple[str, str], dict[str, dict[str, list[str]]]] = {}
    conflicted = {(k, ns, n) for k, ns, n, _ in host.conflicts()}
    for kind, reg in host.registries.items():
        for entry in reg.all_entries():
            key = (entry.provider.dist, entry.provider.version)
            label = entry.name
            if entry.alias_of:
                label += f" (alias of {entry.alias_of})"
            elif getattr(entry.obj, "unavailable", None) and entry.obj.unavailable():
                label += f" ({entry.obj.unavailable()})"
            if (kind, entry.namespace, entry.name) in conflicted:
                label += " (conflict)"
            by_field = dists.setdefault(key, {}).setdefault(kind, {})
            by_field.setdefault(reg.field_of(entry.namespace), []).append(label)
    for p in host.plugins:
        dists.setdefault((p.provider.dist, p.provider.version), {})
    conflicts = [
        {
            "kind": k,
            "name": n,
            "field": host.registry(k).field_of(ns),
            "providers": [f"{p.dist} {p.version}" for p in ps],
        }
        for k, ns, n, ps in host.conflicts()
    ]
    failures = [
        {"plugin": f.plugin, "dist": f.dist, "error": f.error, "skipped": f.skipped, "help": f.help}
        for f in host.failures
    ]
    declared: dict[tuple[str, str], tuple[str, str]] = {}  # dist -> (requires, plugin API)
    for p in host.plugins:
        if p.provider.dist != CORE_DISTRIBUTION:
            key = (p.provider.dist, p.provider.version)
            old_req, old_api = declared.get(key, ("", ""))
            declared[key] = (old_req or p.requires_core, old_api or p.plugin_api)
    if as_json:
        out = {
            "core": {
                "distribution": CORE_DISTRIBUTION,
                "version": __version__,
                "plugin_api": PLUGIN_API_VERSION,
            },
            "plugins": [
                {
                    "name": d,
                    "version": v,
                    "types": {
                        kind: [x for labels in by_field.values() for x in labels]
                        for kind, by_field in types.items()
                    },
                    "types_by_field": types,
                    "requires": declared.get((d, v), ("", ""))[0] or None,
                    "plugin_api": declared.get((d, v), ("", ""))[1] or None,
                }
                for (d, v), types in sorted(dists.items())
            ],
            "conflicts": conflicts,
            "failed": failures,
        }
        print(json.dumps(out, indent=2))
        return
    rows = []
    for (d, v), types in sorted(dists.items()):
        for kind in host.registries:
            for fieldname, labels in types.get(kind, {}).items():
                rows.append((f"{d} {v}", fieldname, kind, ", ".join(labels)))
    heads = ("distribution", "selected by", "kind")
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(heads)]
    print("  ".join(f"{h:<{w}}" for h, w in zip(heads, widths, strict=True)) + "  types")
    print("  ".join("-" * w for w in widths) + "  -----")
    last = None
    for dist, fieldname, kind, names in rows:
        shown = dist if dist != last else ""
        print(f"{shown:<{widths[0]}}  {fieldname:<{widths[1]}}  {kind:<{widths[2]}}  {names}")
        last = dist
    core = f"{CORE_DISTRIBUTION} {__version__}"
    print(f"\nplugin API {PLUGIN_API_VERSION} ({core}); plugins declare:")
    for (d, v), (requires, api) in sorted(declared.items()):
        ranges = [f"{CORE_DISTRIBUTION}{requires}"] if requires else []
        ranges += [f"SINGA_PLUGIN_API {api}"] if api else []
        said = ", ".join(ranges) + ": compatible" if ranges else "no range (assumed compatible)"
        print(f"  {d} {v}  {said}")
    for c in conflicts:
        print(
            f"conflict: {c['kind']} {c['field']} {c['name']} is provided by "
            f"{' and '.join(c['providers'])}",
            file=sys.stderr,
        )
    for f in host.failures:
        said = "skipped" if f.skipped else "failed"
        print(f"{said}: plugin '{f.plugin}' from {f.dist}: {f.error}", file=sys.stderr)
        if f.help:
            print(f"help: {f.help}", file=sys.stderr)
        if verbose and f.detail:
            print(f.detail, file=sys.stderr)


@app.command(
    epilog="""Examples:
  singa data mnist --out examples/mnist
  SINGA_DATA=/data singa data mnist --out examples/mnist   # /data/mnist holds the .gz files
  singa data cifar10 --out examples/cifar10 --from ~/Downloads/cifar-10-batches-bin
  singa data images ~/photos --out data/photos --resize 64 64 --shuffle --val-fraction 0.2""",
    # a converter's own arguments (`singa data images DIR --resize W H ...`)
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def data(
    ctx: typer.Context,
    name: Annotated[
        str,
        typer.Argument(
            metavar="NAME", help="dataset name: mnist, cifar10, tinyshakespeare, images DIR"
        ),
    ],
    out: Annotated[
        Path, typer.Option("--out", metavar="DIR", help="folder to write SINGA's stores into")
    ],
    source: Annotated[
        Path | None,
        typer.Option(
            "--from",
            metavar="DIR",
            help="folder holding the raw files (default: $SINGA_DATA/NAME, else download "
            "into ~/.cache/singa)",
        ),
    ] = None,
) -> None:
    """Convert a dataset's raw files into SINGA's record stores."""
    from singa_core.commands.datasets import prepare_dataset

    try:
        host = _host()
        try:
            conv_cls = host.get("dataset", name, what="dataset")
        except SingaError as err:
            raise err.located(f"singa data {name}") from None
        said: list[str] = []

        def log(message: str) -> None:
            said.append(message)
            print(message, file=sys.stderr)

        conv = conv_cls()
        if ctx.args:  # the converter's own arguments; `configure` may name the source
            configure = getattr(conv, "configure", None)
            if configure is None:
                raise SingaError(
                    f"singa data {name} takes no arguments besides --out and --from, "
                    f"got {' '.join(ctx.args)}",
                    help=f"singa data {name} --help",
                )
            source = configure(list(ctx.args)) or source
        written = prepare_dataset(conv, out, source, log=log)
    except SingaError as err:
        _fail(err)
    for p in written:  # the files the converter did not already tell of
        if not any(str(p) in message for message in said):
            print(f"wrote {p}")


@app.command(
    "compile-proto",
    epilog="""Examples:
  singa compile-proto singa_foo/foo.proto --out singa_foo""",
)
def compile_proto(
    files: Annotated[
        list[Path], typer.Argument(metavar="FILE.proto", help="your plugin's .proto files")
    ],
    out: Annotated[
        Path,
        typer.Option("--out", metavar="DIR", help="where to write the _pb2.py modules"),
    ] = Path("."),
    include: Annotated[
        list[Path] | None,
        typer.Option("-I", metavar="DIR", help="extra include folder (repeatable)"),
    ] = None,
) -> None:
    """Compile a plugin's .proto (which may `import "singa_core/schema/job.proto"`)."""
    from singa_core.schema import compile_plugin_protos

    try:
        compile_plugin_protos([str(f) for f in files], str(out), [str(i) for i in include or []])
    except SingaError as err:
        _fail(err)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise typer.Exit(USER_ERROR_EXIT) from None


@app.command(
    "new-plugin",
    epilog="""Examples:
  singa new-plugin scaled-tanh --kind layer
  singa new-plugin my-sgd --kind updater --out plugins-dev""",
)
def new_plugin(
    name: Annotated[
        str, typer.Argument(metavar="NAME", help="the plugin's name, e.g. scaled-tanh")
    ],
    kind: Annotated[
        str,
        typer.Option(
            "--kind",
            metavar="KIND",
            help="layer, worker, updater, lr, paramgen, engine, store or dataset",
        ),
    ],
    out: Annotated[
        Path,
        typer.Option("--out", metavar="DIR", help="folder to create the package folder in"),
    ] = Path("."),
    field_number: Annotated[
        int | None,
        typer.Option(
            metavar="N", help="the .proto extension's field number (default: from the name)"
        ),
    ] = None,
) -> None:
    """Write a ready plugin package: pyproject, module, .proto extension, README, tests."""
    from singa_core.commands.scaffold import new_plugin as scaffold
    from singa_core.commands.scaffold import next_steps, what_was_written

    try:
        root, written, note = scaffold(name, kind, out, number=field_number)
    except SingaError as err:
        _fail(err)
    for path in written:
        print(f"wrote {path}")
    print(what_was_written(root, kind))  # the type is named after the plugin, not its code
    if note:
        print(f"note: {note}", file=sys.stderr)
    print("next:", *(f"  {step}" for step in next_steps(root, kind)), sep="\n")


@app.command(
    "time",
    epilog="""Examples:
  singa time examples/mnist/job.conf
  singa time examples/mnist/conv.conf --iterations 20 --json""",
)
def time_command(
    job: JobArg,
    iterations: Annotated[
        int, typer.Option("--iterations", "-n", metavar="N", help="timed training steps")
    ] = 10,
    warmup: Annotated[
        int, typer.Option("--warmup", metavar="N", help="untimed steps before them")
    ] = 2,
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
    override: OverrideOpt = None,
    seed: Annotated[
        int | None, typer.Option(metavar="N", help="random seed (overrides job.conf's seed)")
    ] = None,
    device: DeviceOpt = None,
) -> None:
    """Time the train net's layers, forward and backward, like `caffe time`.

    Runs N training steps on real batches in memory (nothing is written: no checkpoint,
    no metrics) and prints per layer its type, output shape, forward and backward ms, its
    share of the step and GFLOP/s where the layer knows its FLOPs, then the updater's and
    the engine's share."""

    from singa_core.commands.timing import time_training_step
    from singa_core.jobconf.parse import load_job
    from singa_core.running.job import prepare_job
    from singa_core.running.thread_trial import needs_choice, pin_the_set_count

    try:
        if iterations < 1 or warmup < 0:
            raise SingaError(
                f"--iterations must be at least 1 and --warmup not negative "
                f"(got {iterations}, {warmup})",
                where="--iterations" if iterations < 1 else "--warmup",
                help="e.g. --iterations 10",
            )
        host = _host()
        cfg = load_job(job, override or [])
        prepared = prepare_job(cfg, host, seed=seed, device=device)
        if any(d.kind != "cpu" for d in prepared.devices):  # on stderr: --json stays JSON
            for line in prepared.device_lines():
                print(line, file=sys.stderr)
        # as `singa train` chooses: job.conf, else the environment, else timed training
        # steps at 1 thread and at all
        choose = needs_choice(prepared.job)
        if not choose:
            pin_the_set_count(prepared.job)
        timing = time_training_step(prepared, iterations, warmup, choose_threads=choose)
        if timing.threads is not None:
            n, why = timing.threads
            print(f"BLAS threads: {n} ({why})", file=sys.stderr)  # stdout may be --json
    except SingaError as err:
        _fail(err)
    if as_json:
        print(json.dumps({"job": str(job), **timing.as_dict()}, indent=2))
        return
    for line in timing.table():
        print(line)


@app.command(
    epilog="""Examples:
  singa plot examples/mnist
  singa plot examples/mnist --terminal
  singa plot runs/lr-0.01 runs/lr-0.001 --out compare.png --metric loss
  singa plot examples/mnist/tune-tune --terminal"""
)
def plot(
    workspaces: Annotated[
        list[Path],
        typer.Argument(
            metavar="WORKSPACE",
            help="workspaces written by `singa train` (overlaid), or a study folder of "
            "`singa tune`",
        ),
    ],
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            metavar="FILE.png",
            help="the PNG to write (default: FIRST_WORKSPACE/plot.png)",
        ),
    ] = None,
    terminal: Annotated[
        bool, typer.Option("--terminal", help="draw in the terminal instead (no matplotlib)")
    ] = False,
    metric: Annotated[
        list[str] | None,
        typer.Option(
            "--metric",
            metavar="NAME",
            help="plot this metric (repeatable; default: loss, accuracy)",
        ),
    ] = None,
) -> None:
    """Plot loss and accuracy against step (train, test, validation) from metrics.jsonl.

    Given a study folder of `singa tune`: the objective over the trials (and the best so
    far) and each trial's objective at its test passes."""
    from singa_core.commands import plotting

    try:
        if len(workspaces) == 1 and plotting.is_study(workspaces[0]):
            study = plotting.read_study(workspaces[0])
            if terminal:
                import shutil

                width = shutil.get_terminal_size((100, 24)).columns
                print(plotting.plot_study_terminal(study, width=width))
                return
            target = out if out is not None else workspaces[0] / "plot.png"
            plotting.plot_study_png(study, target)
            print(f"wrote {target}")
            return
        runs = plotting.load_runs(workspaces)
        metrics = plotting.choose_metrics(runs, metric)
        if terminal:
            import shutil

            width = shutil.get_terminal_size((100, 24)).columns
            print(plotting.plot_terminal(runs, metrics, width=width))
            return
        target = (
            out if out is not None else plotting.metrics_file(workspaces[0]).parent / "plot.png"
        )
        plotting.plot_png(runs, metrics, target)
    except SingaError as err:
        _fail(err)
    print(f"wrote {target}")


@app.command(
    epilog="""Examples:
  singa predict examples/mnist/job.conf digit0.png digit1.png
  singa predict examples/cifar10/job.conf batch.npy --top-k 3 --output preds.jsonl
  singa predict examples/mnist/job.conf examples/mnist/test_data.bin --output preds.csv"""
)
def predict(
    job: JobArg,
    inputs: Annotated[
        list[Path],
        typer.Argument(
            metavar="INPUT...",
            help="image files (PNG/JPEG), .npy/.npz arrays of raw samples, or a SINGA store "
            "(kvfile records, CSV)",
        ),
    ],
    override: OverrideOpt = None,
    checkpoint: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            help="the checkpoint file (or its folder, or a workspace) to predict with "
            "(default: the newest in the workspace, else checkpoint_path)",
        ),
    ] = None,
    top_k: Annotated[
        int, typer.Option("--top-k", metavar="K", help="classes to show per input")
    ] = 1,
    output: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            help="write the predictions to FILE.jsonl (top-k per input), FILE.csv (top-1) or "
            "FILE.npz (the whole output matrix) instead of a table",
        ),
    ] = None,
    labels: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            help="class names, one a line (default: labels.txt beside JOB.conf, if any)",
        ),
    ] = None,
    resize: Annotated[
        bool,
        typer.Option("--resize", help="scale (and convert) images to the model's input size"),
    ] = False,
    layout: Annotated[
        str | None,
        typer.Option(
            "--layout",
            metavar="NCHW|NHWC",
            help="how .npy/.npz images are laid out: NCHW (channels first, as the records "
            "hold them; the default) or NHWC (channels last, as PIL and OpenCV hold them)",
        ),
    ] = None,
    sample_shape: SampleShapeOpt = None,
    workspace: WorkspaceOpt = None,
    device: DeviceOpt = None,
) -> None:
    """Predict with a trained model: class probabilities (or the output layer's values).

    Runs the deploy net (`singa train JOB.conf --dry-run --deploy` shows it) with the
    newest checkpoint of the job's workspace on raw samples, as the data layer reads them
    from records (pixels 0-255), applying the data layer's own preprocessing. Of the
    training data only the first 256 records are read (when the store is there), for the
    range of values the model was trained on: inputs far from it get a warning."""
    from singa_core.api.job import Job
    from singa_core.inference.input_range import predict_noting_range
    from singa_core.inference.inputs import (
        predictions_bytes,
        predictions_table,
        read_inputs,
        read_labels,
    )
    from singa_core.running.fileio import atomic_write_bytes, output_target
    from singa_core.running.thread_trial import (
        choose_for_model,
        needs_choice,
        pin_the_set_count,
    )

    _at_least("--sample-shape", sample_shape, 1, "a sample dimension", "--sample-shape 28")
    try:
        fmt = None
        if output is not None:
            output_target(output, "predictions")  # never a device, FIFO or folder
            fmt = output.suffix.lower().lstrip(".")
            if fmt not in ("jsonl", "csv", "npz"):
                raise SingaError(
                    f"cannot tell the format of {output.name!r} from its suffix",
                    where="--output",
                    help="name it FILE.jsonl, FILE.csv or FILE.npz",
                )
        run = Job.from_file(job, override, workspace=workspace)
        if device is not None:  # opened here, so its errors say --device as train's do
            from singa_core.contracts.device import open_device

            device = open_device(device, where="--device")
        model = run.model(checkpoint, sample_shape=tuple(sample_shape or ()) or None, device=device)
        _sample_shape_agrees(model, sample_shape)
        if not 1 <= top_k <= model.num_outputs:
            raise SingaError(
                f"--top-k {top_k}: the model has {model.num_outputs} outputs",
                where="--top-k",
                help=f"give a K between 1 and {model.num_outputs}",
            )
        if labels is None and (job.parent / "labels.txt").is_file():
            labels = job.parent / "labels.txt"
        notes: list[str] = []
        names, samples = read_inputs(
            inputs, model.sample_shape, resize=resize, layout=layout, notes=notes
        )
        for note in notes:  # a colour image made grey by --resize, ...
            print(f"note: {note}", file=sys.stderr)
        if needs_choice(model.plan.job):  # BLAS threads as `singa train` chooses them
            n, why = choose_for_model(model, samples)
            print(f"BLAS threads: {n} ({why})", file=sys.stderr)
        else:  # job.conf's or the environment's count, applied as train applies it
            pin_the_set_count(model.plan.job)
        _say_checkpoint(model)  # after the inputs' checks: an error comes first
        scores = predict_noting_range(model, samples)  # a far-off range: a warning line
        class_names = read_labels(labels)
        if output is None:
            print(predictions_table(names, scores, top_k, class_names))
            return
        data = predictions_bytes(fmt, names, scores, top_k, class_names)
        atomic_write_bytes(output, data, "predictions")
    except SingaError as err:
        _fail(err)
    print(f"wrote {len(names)} predictions to {output}", file=sys.stderr)


@app.command(
    epilog="""Examples:
  singa export examples/mnist/job.conf --format onnx --out mlp.onnx
  singa export examples/cifar10/job.conf --format safetensors --out cifar10.safetensors"""
)
def export(
    job: JobArg,
    out: Annotated[Path, typer.Option(metavar="FILE", help="the file to write")],
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format",
            metavar="onnx|safetensors",
            help="onnx: the deploy net as one graph (input 'input': raw samples; output "
            "'output': what predict returns); safetensors: every Param by name (default: "
            "from FILE's suffix, .onnx or .safetensors, which must agree with it)",
        ),
    ] = None,
    override: OverrideOpt = None,
    checkpoint: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            help="the checkpoint file (or its folder, or a workspace) to export (default: "
            "the newest in the workspace, else checkpoint_path)",
        ),
    ] = None,
    workspace: WorkspaceOpt = None,
    sample_shape: SampleShapeOpt = None,
    onnx_state: Annotated[
        str | None,
        typer.Option(
            "--onnx-state",
            metavar="required|optional",
            help="ONNX only: the form of a recurrent layer's state input '<layer>/state' "
            "(char-rnn's GRU); required: a plain input the caller always feeds, zeros to "
            "start (runs in onnxruntime, onnx's ReferenceEvaluator and onnx2torch); "
            "optional: zeros when not fed (onnxruntime, ReferenceEvaluator; not "
            "onnx2torch) (default: required)",
        ),
    ] = None,
) -> None:
    """Export a trained model: ONNX (the deploy net, preprocessing included) or
    safetensors (the Params, with the job.conf in the metadata)."""
    from singa_core.api.job import Job
    from singa_core.inference.formats import export_format
    from singa_core.running.fileio import output_target

    _at_least("--sample-shape", sample_shape, 1, "a sample dimension", "--sample-shape 28")
    try:
        output_target(out, "export")  # never a device, FIFO or folder (before any work)
        fmt = export_format(out, fmt)
        if onnx_state is not None and fmt != "onnx":
            raise SingaError(
                f"--onnx-state applies to --format onnx, not {fmt}",
                where="--onnx-state",
                help="leave it out",
            )
        from singa_core.inference.onnx_export import STATE_FORMS

        if onnx_state is not None and onnx_state not in STATE_FORMS:
            raise SingaError(
                f"--onnx-state {onnx_state}: the state's form is required or optional",
                where="--onnx-state",
                help="give --onnx-state required (the default) or --onnx-state optional",
            )
        run = Job.from_file(job, override, workspace=workspace)
        if fmt == "onnx":
            from singa_core.inference.onnx_export import export_onnx

            model = run.model(checkpoint, sample_shape=tuple(sample_shape or ()) or None)
            _sample_shape_agrees(model, sample_shape)
            summary = export_onnx(model, out, onnx_state or "required")
            said = [f"checkpoint: {info}" for info in model.checkpoints]
            said += model.checkpoint_notes
        else:
            from singa_core.inference.model import (
                checkpoint_files,
                checkpoint_report,
                from_workspace,
            )
            from singa_core.inference.safetensors_export import export_safetensors

            ws = run.workspace_override or run.cfg.job.cluster.workspace
            files = checkpoint_files(ws, checkpoint, list(run.cfg.job.checkpoint_path))
            said = checkpoint_report(files, ws, default=from_workspace(ws, checkpoint))
            summary = export_safetensors(run, out, checkpoint)
    except SingaError as err:
        _fail(err)
    for line in said:  # which checkpoint: path, step, when, which run
        print(line, file=sys.stderr)
    print(summary)


def _say_checkpoint(model) -> None:
    """Which checkpoint a model uses (path, step, when, which run), and notes about it."""
    for info in model.checkpoints:
        print(f"checkpoint: {info}", file=sys.stderr)
    for note in model.checkpoint_notes:
        print(note, file=sys.stderr)


@app.command()
def version() -> None:
    """Print singa's version."""
    print(__version__)


# singa submit, jobs, logs, stop: their own module (singa_core/commands/jobs.py)
_jobs_commands.register(app)
# singa tune: its own module (singa_core/commands/tune.py)
_tune_commands.register(app)


def main() -> None:
    from singa_core.contracts.errors import show_singa_warnings
    from singa_core.jobconf.legacy import translate_argv

    show_singa_warnings()  # a SingaWarning is one `warning:` line

    args, notes = translate_argv(sys.argv[1:])  # SINGA 0.3's -conf, -singa_conf, ...
    for note in notes:
        print(note, file=sys.stderr)
    from singa_core.commands.data_help import converter_help

    shown = converter_help(args, _host)  # `singa data images --help`: its own options too
    if shown is not None:
        print(shown, end="")
        return
    try:
        restore_interrupts()  # from here a Ctrl-C is a KeyboardInterrupt again
        app(args=args, prog_name="singa")
    except KeyboardInterrupt:  # Ctrl-C outside the training loop (which handles its own)
        print("interrupted", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
