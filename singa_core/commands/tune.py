"""``singa tune``: a study over a job.conf's fields (the machinery is
:mod:`singa_core.tuning`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from singa_core.contracts.errors import SingaError


def _fail(err: SingaError) -> None:
    print(err.format(), file=sys.stderr)
    raise typer.Exit(2)


def _at_least(option: str, value: int | None, low: int, example: str) -> None:
    if value is not None and value < low:
        _fail(
            SingaError(
                f"{option} is {value}; it must be at least {low}",
                where=option,
                help=f"e.g. {option} {example}",
            )
        )


def show(folder: Path, as_json: bool) -> None:
    """``singa tune --show STUDY``: the study's trials, finished or running."""
    from singa_core.tuning import results
    from singa_core.tuning.study import open_study

    study = open_study(folder)
    records = study.trials()
    space = study.space
    best = results.best_records(space, records, 1)
    if as_json:
        doc = {
            "study": study.record.name,
            "folder": str(study.folder),
            "job": study.record.source_job,
            "space": study.record.source_space,
            "objective": {
                "metric": space.objective.metric,
                "phase": space.objective.phase,
                "at": space.objective.at,
                "direction": "maximize" if space.objective.maximize else "minimize",
            },
            "fields": [d.field for d in space.dims],
            "seed": study.record.seed,
            "budget": space.trials,
            "best": best[0].number if best else None,
            "trials": [r.as_dict() for r in records],
        }
        print(json.dumps(doc, indent=1))
        return
    print(
        f"study {study.record.name} ({study.folder}): {study.record.source_job} with "
        f"{study.record.source_space}; {space.objective.describe()}; seed {study.record.seed}"
    )
    heads, rows = results.table_rows(space, records)
    for line in results.format_table(heads, rows):
        print(line)
    for r in records:
        if r.state == "failed" and r.reason:
            print(f"  trial {r.number}: {r.reason}")
    if best:
        b = best[0]
        print(
            f"best: trial {b.number}, {space.objective.metric} {b.value:.6g}"
            + (f"; {study.folder / 'best.conf'}" if (study.folder / "best.conf").is_file() else "")
        )
    else:
        print("best: no trial has completed yet")


def register(app) -> None:
    """Add ``singa tune`` to the ``singa`` app."""

    @app.command(
        epilog="""Examples:
  singa tune examples/mnist/job.conf examples/mnist/tune.conf
  singa tune job.conf space.conf --study runs/s1 --trials 24 --parallel 2 --seed 1
  singa tune --resume --study runs/s1
  singa tune --show runs/s1 --json
  singa tune job.conf space.conf --engine ray --address 10.0.0.1:6379
  singa plot runs/s1""",
    )
    def tune(
        job: Annotated[
            Path | None,
            typer.Argument(metavar="JOB.conf", help="the job.conf whose fields are searched"),
        ] = None,
        space: Annotated[
            Path | None,
            typer.Argument(
                metavar="SPACE",
                help="the search space: fields (as -o names them) and their distributions, "
                "the objective, the budget (protobuf text; see docs/guide/tuning.md)",
            ),
        ] = None,
        study: Annotated[
            Path | None,
            typer.Option(
                "--study",
                metavar="DIR",
                help="the study folder: its Optuna store, every trial's workspace, best.conf "
                "(default: WORKSPACE/tune-SPACE, WORKSPACE being job.conf's)",
            ),
        ] = None,
        trials: Annotated[
            int | None,
            typer.Option(metavar="N", help="trials in all (default: the space's budget)"),
        ] = None,
        parallel: Annotated[
            int | None,
            typer.Option(
                metavar="N",
                help="trials at once (default: one per CPU on this machine; on a cluster, "
                "one per free CPU)",
            ),
        ] = None,
        trial_threads: Annotated[
            int | None,
            typer.Option(
                "--trial-threads",
                metavar="N",
                help="BLAS threads of each trial (default: the CPUs shared among the "
                "parallel trials; 1 on a cluster, where each trial reserves that many CPUs)",
            ),
        ] = None,
        seed: Annotated[
            int | None,
            typer.Option(
                metavar="N",
                help="the study's seed: the values proposed and every trial's job seed "
                "(default: job.conf's seed, else 0)",
            ),
        ] = None,
        keep: Annotated[
            int,
            typer.Option(
                metavar="N",
                help="keep the checkpoints of the best N trials; the others' are removed at "
                "the end (their metrics.jsonl and log stay)",
            ),
        ] = 3,
        override: Annotated[
            list[str] | None,
            typer.Option(
                "-o",
                "--override",
                metavar="FIELD=VALUE",
                help="set a field of job.conf for every trial (repeatable)",
            ),
        ] = None,
        resume: Annotated[
            bool,
            typer.Option(
                "--resume",
                help="continue the study in --study DIR: interrupted trials from their "
                "checkpoints, then new ones up to the budget",
            ),
        ] = False,
        show_dir: Annotated[
            Path | None,
            typer.Option(
                "--show", metavar="DIR", help="list the study in DIR (finished or running)"
            ),
        ] = None,
        as_json: Annotated[
            bool, typer.Option("--json", help="with --show: machine-readable output")
        ] = False,
        engine: Annotated[
            str | None,
            typer.Option(
                metavar="NAME",
                help="run the trials on an engine's cluster (ray; default: processes on "
                "this machine)",
            ),
        ] = None,
        address: Annotated[
            str | None,
            typer.Option(metavar="HOST:PORT", help="with --engine ray: the cluster's head"),
        ] = None,
        insecure: Annotated[
            bool,
            typer.Option(
                "--insecure", help="with --engine ray: also join a cluster that checks no tokens"
            ),
        ] = False,
    ) -> None:
        """Search a job.conf's fields: run a study of trials, each a singa job.

        Trials run in parallel (one per CPU on this machine, or on a Ray cluster's free
        nodes); a model-based sampler (TPE) or random search proposes the values, weak
        trials stop early at their test passes, and the study lives in DIR/study.db
        (Optuna's SQLite store): Ctrl-C or a killed tuner loses no finished trial, and
        --resume continues. At the end: the best trials, DIR/best.conf and the command that
        trains it again."""
        from singa_core.tuning.launch import runner_for
        from singa_core.tuning.study import create_study, resume_study

        _at_least("--trials", trials, 1, "24")
        _at_least("--parallel", parallel, 1, "2")
        _at_least("--trial-threads", trial_threads, 1, "1")
        _at_least("--keep", keep, 0, "3")
        try:
            if show_dir is not None:
                show(show_dir, as_json)
                return
            if as_json:
                raise SingaError(
                    "--json goes with --show", where="--json", help="singa tune --show DIR --json"
                )
            if resume:
                if study is None:
                    raise SingaError(
                        "--resume continues the study of --study DIR",
                        where="--resume",
                        help="singa tune --resume --study DIR",
                    )
                if job is not None or override:
                    raise SingaError(
                        "--resume runs the study's own job.conf and space (copied into its "
                        "folder), with the -o it started with",
                        where=str(job) if job is not None else "-o",
                        help=f"leave them out: singa tune --resume --study {study}",
                    )
                s = resume_study(study)
            else:
                if job is None or space is None:
                    raise SingaError(
                        "singa tune needs a job.conf and a search space",
                        where="singa tune",
                        help="singa tune JOB.conf SPACE (or --resume --study DIR, --show DIR)",
                    )
                s = create_study(job, space, study, seed=seed, overrides=list(override or []))
            try:
                if seed is not None and resume and seed != s.record.seed:
                    print(
                        f"note: the study's seed is {s.record.seed}; --seed {seed} is ignored",
                        file=sys.stderr,
                    )
                runner = runner_for(engine, address, insecure)
                result = s.run(trials=trials, parallel=parallel, threads=trial_threads,
                               keep=keep, runner=runner)  # fmt: skip
            finally:
                s.close()
        except SingaError as err:
            _fail(err)
        print(result.summary(), file=sys.stderr)
        if result.interrupted:
            raise typer.Exit(128 + (result.stop_signal or 2))
