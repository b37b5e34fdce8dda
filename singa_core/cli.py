"""The ``singa`` command line.

User errors (:class:`~singa_core.errors.SingaError`) are printed as ``WHERE: error: WHAT``
plus a ``help:`` line and exit with status 2, without a traceback.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from singa_core import __version__
from singa_core.errors import USER_ERROR_EXIT, SingaError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="singa: train SINGA 0.x job.conf files; extend it with pip-installable plugins.",
    context_settings={"help_option_names": ["-h", "--help"]},
)

JobArg = Annotated[Path, typer.Argument(help="the job.conf file (protobuf text format)")]
OverrideOpt = Annotated[
    list[str] | None,
    typer.Option("-o", "--override", help="set a field, e.g. -o train_steps=100 (repeatable)"),
]


def _fail(err: SingaError) -> None:
    print(err.format(), file=sys.stderr)
    raise typer.Exit(getattr(err, "exit_code", USER_ERROR_EXIT))  # 3: numeric.NonFiniteError


def _host():
    from singa_core.plugin_host import get_host

    host = get_host()
    for f in host.failures:
        print(f.warning(), file=sys.stderr)
    return host


def select_engine(host, job, name: str | None):
    reg = host.registry("engine")
    if name:
        cls = host.get("engine", name)
        reason = cls.supports(job)
        if reason:
            raise SingaError(
                f"engine '{name}' cannot run this job: {reason}",
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


def _prepare(
    job_path: Path,
    overrides,
    *,
    resume=False,
    seed=None,
    workspace=None,
    test_only=False,
    resume_from=None,
):
    from singa_core.config import load_job
    from singa_core.job import prepare_job

    host = _host()
    cfg = load_job(job_path, overrides or [])
    prepared = prepare_job(
        cfg,
        host,
        resume=resume,
        resume_from=resume_from,
        seed=seed,
        workspace=workspace,
        test_only=test_only,
    )
    for line in prepared.notices.values():
        print(line, file=sys.stderr)
    return prepared


def _before_training(prepared) -> bool:
    """Housekeeping before a run: remove the temp files killed runs left behind; for a
    resumed run, drop the metrics.jsonl records logged after its checkpoint. False if a
    resumed run has nothing left to train (the note says why)."""
    from singa_core.checkpoint import remove_stale_files
    from singa_core.reporting import rewind_metrics

    stale = remove_stale_files(prepared.workspace)
    if stale:
        names = ", ".join(f.name for f in stale[:5]) + (" ..." if len(stale) > 5 else "")
        print(
            f"note: removed {len(stale)} temporary file(s) left in {prepared.workspace} by an "
            f"earlier interrupted run: {names}",
            file=sys.stderr,
        )
    if not prepared.resume:
        return True
    step, total = prepared.start_step, prepared.job.train_steps
    if step >= total:
        print(
            f"note: the checkpoint to resume from is step {step}, at or past train_steps "
            f"({total}): nothing to train; raise train_steps (e.g. -o train_steps="
            f"{step + max(total, 1)}) to continue, or use --resume-from STEP for an earlier one",
            file=sys.stderr,
        )
        return False
    rewind_metrics(
        prepared.workspace / "metrics.jsonl", step, prepared.resume_meta.get("evaluated", ())
    )
    return True


def _non_finite_stop(err, prepared, reporter) -> None:
    """A NaN/inf stopped training (exit 3): name the newest good checkpoint, log it."""
    from singa_core.checkpoint import find_resume

    try:
        step, files, _ = find_resume(prepared.workspace)
        good = f"{files[0]} (step {step})"
        err.notes.append(
            f"the newest good checkpoint is {good}; it is intact: fix the cause and "
            "continue with `singa train --resume`"
        )
    except SingaError:
        good = None
        err.notes.append("no good checkpoint was written (set checkpoint_freq to save some)")
    reporter.event("non_finite", step=err.step, error=err.message, checkpoint=good)


def _print_net(prepared, engine) -> None:
    from singa_core.layer import kTrain
    from singa_core.net import PHASE_NAMES

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


@app.command()
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
        int | None, typer.Option(help="job-level random seed (overrides job.conf's seed)")
    ] = None,
    engine: Annotated[
        str | None,
        typer.Option(help="engine plugin to run the job (default: chosen from the cluster config)"),
    ] = None,
    workspace: Annotated[str | None, typer.Option(help="override cluster.workspace")] = None,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="no metric lines, only the summary")
    ] = False,
    address: Annotated[
        str | None,
        typer.Option(
            help="engines that run on a cluster: the cluster to join, HOST:PORT or auto "
            "(default: the engine's own, e.g. a private one-node runtime)"
        ),
    ] = None,
    placement: Annotated[
        str | None,
        typer.Option(help="engines that run on a cluster: spread (default) or pack processes"),
    ] = None,
    max_restarts: Annotated[
        int | None,
        typer.Option(
            help="engines that run on a cluster: restart from the newest checkpoint up to N "
            "times when a process or node is lost (default 0: stop)"
        ),
    ] = None,
    engine_option: Annotated[
        list[str] | None,
        typer.Option("--engine-option", help="an engine's own option KEY=VALUE (repeatable)"),
    ] = None,
    tensorboard: Annotated[
        bool,
        typer.Option(
            "--tensorboard/--no-tensorboard",
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
) -> None:
    """Train the model a job.conf describes."""
    if keep_checkpoints is not None:
        override = [*(override or []), f"keep_checkpoints={keep_checkpoints}"]
    reporter = prepared = None
    try:
        prepared = _prepare(
            job, override, resume=resume, seed=seed, workspace=workspace, resume_from=resume_from
        )
        engine_cls = select_engine(prepared.host, prepared.job, engine)
        from singa_core.reporting import Reporter

        board = None
        if tensorboard and not dry_run:
            from singa_core.tensorboard import TensorBoardLog

            board = TensorBoardLog.create(prepared.workspace / "tensorboard", histograms=histograms)
        reporter = Reporter(
            metrics_path=None if dry_run else prepared.workspace / "metrics.jsonl",
            quiet=quiet,
            tensorboard=board,
        )
        eng = engine_cls(prepared, reporter)
        eng.configure(
            _engine_options(
                address=address,
                placement=placement,
                max_restarts=max_restarts,
                extra=engine_option or [],
            )
        )
        if dry_run:
            _print_net(prepared, eng)
            print(f"{job}: ok")
            return
        plugins = ", ".join(f"{d}-{v}" for d, v in prepared.host.distributions())
        if not _before_training(prepared):
            return
        if not prepared.resume:
            from singa_core.checkpoint import latest_checkpoint

            old = latest_checkpoint(prepared.workspace)
            if old is not None:
                print(
                    f"note: {prepared.workspace / 'checkpoint'} has checkpoints up to step "
                    f"{old[0]}; this new run overwrites them (use --resume to continue)",
                    file=sys.stderr,
                )
        start = f"resuming at step {prepared.start_step}" if prepared.resume else "starting"
        print(
            f"singa {__version__} | job '{prepared.job.name or job.stem}' {start} | "
            f"seed {prepared.seed} | engine {engine_cls.type_names[0]} | plugins: {plugins}",
            file=sys.stderr,
        )
        result = eng.train()
    except SingaError as err:
        if getattr(err, "exit_code", None) == 3 and reporter is not None:
            _non_finite_stop(err, prepared, reporter)
        _fail(err)
    ms = reporter.mean_step_ms
    print(
        f"finished at step {result.final_step} ({ms:.1f} ms/step); checkpoint: {result.checkpoint}",
        file=sys.stderr,
    )
    if result.interrupted:
        raise typer.Exit(128 + (result.stop_signal or 2))  # 130 for Ctrl-C, 143 for SIGTERM


@app.command()
def test(
    job: JobArg,
    override: OverrideOpt = None,
    steps: Annotated[
        int | None, typer.Option(help="test mini-batches (default: test_steps)")
    ] = None,
    checkpoint: Annotated[
        list[Path] | None,
        typer.Option(
            help="checkpoint file(s) to load (default: the newest in the workspace, "
            "else checkpoint_path)"
        ),
    ] = None,
    engine: Annotated[str | None, typer.Option()] = None,
) -> None:
    """Evaluate a trained model on the test net (SINGA's -test)."""
    from singa_core.checkpoint import latest_checkpoint
    from singa_core.config import load_job
    from singa_core.job import prepare_job
    from singa_core.reporting import Reporter, format_metrics

    try:
        host = _host()
        cfg = load_job(job, override or [])
        j = cfg.job
        if checkpoint:
            for c in checkpoint:
                if not c.exists():
                    raise SingaError(
                        "checkpoint file not found",
                        where=str(c),
                        help="give a WORKSPACE/checkpoint/step<S>-worker<W> file",
                    )
            del j.checkpoint_path[:]
            j.checkpoint_path.extend(str(c) for c in checkpoint)
        else:
            # the model this job.conf trained: the newest checkpoint of its workspace (it
            # holds every Param, those fine-tuned from checkpoint_path included); without
            # one, checkpoint_path (e.g. a sampling job that reads another job's model)
            found = latest_checkpoint(j.cluster.workspace) if j.cluster.workspace else None
            if found is not None:
                del j.checkpoint_path[:]
                j.checkpoint_path.extend(str(f) for f in found[1])
            elif not j.checkpoint_path:
                raise SingaError(
                    f"no checkpoint to test: "
                    f"{Path(j.cluster.workspace or '.') / 'checkpoint'} has none and "
                    "checkpoint_path is empty",
                    help="train first, or pass --checkpoint FILE",
                )
        n = steps if steps is not None else j.test_steps
        if n <= 0:
            raise SingaError(
                "no test steps",
                where=cfg.locate("test_steps"),
                help="set test_steps in job.conf or pass --steps N",
            )
        prepared = prepare_job(cfg, host, test_only=True)
        engine_cls = select_engine(prepared.host, j, engine)
        eng = engine_cls(prepared, Reporter())
        metrics = eng.test(n)
    except SingaError as err:
        _fail(err)
    shown = format_metrics(metrics) if metrics else "done (the test net reports no metrics)"
    print(f"Test ({n} batches, {', '.join(j.checkpoint_path)}): {shown}")


@app.command("list-plugins")
def list_plugins(
    as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="show import tracebacks")
    ] = False,
) -> None:
    """Show every plugin distribution, its version and the types it provides.

    Each type is listed under the job.conf field that selects it (``type`` for the built-in
    enum names, ``user_type`` for user types, ...); a name two plugins claim is listed
    under every provider and marked ``(conflict)``."""
    from singa_core import CORE_DISTRIBUTION, PLUGIN_API_VERSION
    from singa_core.plugin_host import get_host

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


@app.command()
def data(
    name: Annotated[str, typer.Argument(help="dataset name, e.g. mnist")],
    out: Annotated[Path, typer.Option("--out", help="folder to write SINGA's stores into")],
    source: Annotated[
        Path | None,
        typer.Option(
            "--from",
            help="folder holding the raw files (default: $SINGA_DATA/<name>, else download)",
        ),
    ] = None,
) -> None:
    """Convert a dataset's raw files into SINGA's record stores."""
    from singa_core.datasets import prepare_dataset

    try:
        host = _host()
        conv_cls = host.get("dataset", name, what="dataset")
        written = prepare_dataset(conv_cls(), out, source)
    except SingaError as err:
        _fail(err)
    for p in written:
        print(f"wrote {p}")


@app.command("compile-proto")
def compile_proto(
    files: Annotated[list[Path], typer.Argument(help="your plugin's .proto files")],
    out: Annotated[Path, typer.Option("--out", help="where to write the _pb2.py modules")] = Path(
        "."
    ),
    include: Annotated[list[Path] | None, typer.Option("-I", help="extra include folders")] = None,
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


@app.command("new-plugin")
def new_plugin(
    name: Annotated[str, typer.Argument(help="the plugin's name, e.g. scaled-tanh")],
    kind: Annotated[
        str,
        typer.Option(
            "--kind", help="layer, worker, updater, lr, paramgen, engine, store or dataset"
        ),
    ],
    out: Annotated[
        Path, typer.Option("--out", help="folder to create the package folder in")
    ] = Path("."),
    field_number: Annotated[
        int | None,
        typer.Option(help="the .proto extension's field number (default: from the name)"),
    ] = None,
) -> None:
    """Write a ready plugin package: pyproject, module, .proto extension, README, tests."""
    from singa_core.scaffold import new_plugin as scaffold

    try:
        root, written, note = scaffold(name, kind, out, number=field_number)
    except SingaError as err:
        _fail(err)
    for path in written:
        print(f"wrote {path}")
    if note:
        print(f"note: {note}", file=sys.stderr)
    print(f"next: pip install {root} && singa list-plugins; pytest {root / 'tests'}")


@app.command()
def plot(
    workspaces: Annotated[
        list[Path], typer.Argument(help="workspaces written by `singa train` (overlaid)")
    ],
    out: Annotated[
        Path | None,
        typer.Option("--out", help="the PNG to write (default: FIRST_WORKSPACE/plot.png)"),
    ] = None,
    terminal: Annotated[
        bool, typer.Option("--terminal", help="draw in the terminal instead (no matplotlib)")
    ] = False,
    metric: Annotated[
        list[str] | None,
        typer.Option("--metric", help="plot this metric (repeatable; default: loss, accuracy)"),
    ] = None,
) -> None:
    """Plot loss and accuracy against step (train, test, validation) from metrics.jsonl."""
    from singa_core import plotting

    try:
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


@app.command()
def version() -> None:
    """Print singa's version."""
    print(__version__)


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:  # Ctrl-C outside the training loop (which handles its own)
        print("interrupted", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
