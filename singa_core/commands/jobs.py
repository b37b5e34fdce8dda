"""``singa submit``, ``singa jobs``, ``singa logs`` and ``singa stop``: jobs that outlive
the terminal (the machinery is :mod:`singa_core.api.jobs`)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from singa_core.contracts.errors import SingaError


def _fail(err: SingaError) -> None:
    print(err.format(), file=sys.stderr)
    raise typer.Exit(2)


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _row(info) -> list[str]:
    r = info.record
    state = info.state
    if info.state == "failed":
        state = f"failed (exit {info.exit_code})" if info.exit_code is not None else "failed"
    elif info.state == "running" and not info.checked:
        state = "running? (unchecked)"
    elif info.state == "running" and info.stopping:
        state = "running (stopping)"
    progress = "-"
    if info.step is not None:
        progress = f"{info.step}" + (f"/{info.total}" if info.total else "")
    metrics = ", ".join(f"{k} {v:.4g}" for k, v in info.metrics.items()) or "-"
    engine = info.engine or (r.engine if r.engine != "auto" else "-") or "-"
    return [r.id, r.name, engine, r.host or "-", state, progress, metrics,
            _when(r.submitted), r.workspace or "-"]  # fmt: skip


AddressOpt = Annotated[
    str | None,
    typer.Option(
        metavar="HOST:PORT",
        help="the cluster's jobs (its head's address; default: RAY_ADDRESS; 'local': this "
        "machine's)",
    ),
]
InsecureOpt = Annotated[
    bool,
    typer.Option("--insecure", help="also join a cluster that checks no tokens"),
]


def _cluster_row(rec: dict) -> list[str]:
    state = rec.get("state", "?")
    if state == "failed" and rec.get("exit_code") is not None:
        state = f"failed (exit {rec['exit_code']})"
    elif state == "running" and rec.get("stopping"):
        state = "running (stopping)"
    progress = "-"
    if rec.get("step") is not None:
        progress = f"{rec['step']}" + (f"/{rec['total']}" if rec.get("total") else "")
    metrics = rec.get("metrics") or {}
    latest = ", ".join(f"{k} {v:.4g}" for k, v in metrics.items()) or "-"
    when = _when(rec["submitted"]) if isinstance(rec.get("submitted"), (int, float)) else "-"
    return [str(rec.get("id", "?")), str(rec.get("name", "?")), str(rec.get("submitter", "-")),
            str(rec.get("address", "-")), state, progress, latest, when,
            str(rec.get("workspace", "-"))]  # fmt: skip


def _table(heads: list[str], rows: list[list[str]], notes: list[str]) -> None:
    widths = [max(len(h), *(len(r[k]) for r in rows)) for k, h in enumerate(heads)]
    print("  ".join(h.ljust(w) for h, w in zip(heads, widths, strict=True)).rstrip())
    for row, note in zip(rows, notes, strict=True):
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        if note:
            print(f"    {note}")


def _unreachable(address: str, err: SingaError, as_json: bool) -> None:
    """The cluster does not answer: the jobs this machine submitted there are unknown."""
    from singa_core.api.jobs import cluster_pointers

    if not getattr(err, "unreachable", False):  # it answers (and refuses, or fails a call)
        _fail(err)
    known = cluster_pointers(address)
    if as_json:
        gone = f"the cluster at {address} does not answer"
        print(json.dumps([dict(i.as_dict(), state="unknown", message=gone) for i in known],
                         indent=1))  # fmt: skip
    elif known:
        heads = ["id", "name", "state", "submitted", "workspace"]
        rows = [[i.record.id, i.record.name, "unknown", _when(i.record.submitted),
                 i.record.workspace] for i in known]  # fmt: skip
        _table(heads, rows, [f"on the cluster at {address}, which does not answer"] * len(rows))
    _fail(err)


def _cluster_jobs(cls, address: str, insecure: bool, as_json: bool) -> None:
    try:
        with cls.cluster_jobs(address, insecure) as console:
            recs = console.list()
    except SingaError as err:
        _unreachable(address, err, as_json)
        return
    recs = [{k: v for k, v in r.items() if k != "log_tail"} for r in recs]
    if as_json:
        print(json.dumps(recs, indent=1))
        return
    if not recs:
        print(f"no jobs on the cluster at {address} (singa submit JOB.conf --engine ray "
              f"--address {address} starts one)")  # fmt: skip
        return
    heads = ["id", "name", "submitter", "node", "state", "step", "latest", "submitted",
             "workspace"]  # fmt: skip
    notes = [r.get("message", "") if r.get("state") in ("failed", "stopped", "damaged") else ""
             for r in recs]  # fmt: skip
    _table(heads, [_cluster_row(r) for r in recs], notes)


def _cluster_logs(cls, address: str, insecure: bool, job_id: str, follow: bool) -> None:
    try:
        with cls.cluster_jobs(address, insecure) as console:
            job_id = console.find(job_id)
            offset = 0
            while True:
                text, offset, running = console.log(job_id, offset)
                if text:
                    sys.stdout.write(text)
                    sys.stdout.flush()
                if not follow or not running:
                    if text:
                        continue  # the rest first
                    return
                if not text:
                    time.sleep(0.5)
    except SingaError as err:
        _fail(err)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def _cluster_stop(cls, address: str, insecure: bool, job_id: str, now: bool) -> None:
    try:
        with cls.cluster_jobs(address, insecure) as console:
            job_id = console.find(job_id)
            sent, rec = console.stop(job_id, now)
    except SingaError as err:
        _fail(err)
    a = f" --address {address}"
    if not sent:
        print(
            f"job {job_id} ({rec.get('name')}) is already stopping (a checkpoint first); "
            f"nothing more sent: `singa stop {job_id}{a} --now` kills it at once",
            file=sys.stderr,
        )
        return
    how = "killing" if now else "stopping (a checkpoint first)"
    print(f"{how} job {job_id} ({rec.get('name')}) on the cluster at {address}", file=sys.stderr)


def register(app) -> None:
    """Add the job commands to the ``singa`` app."""

    @app.command(
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
        epilog="""Examples:
  singa submit examples/mnist/job.conf
  singa submit examples/mnist/job.conf --seed 3 -o train_steps=2000
  singa submit job.conf --engine ray --address 10.0.0.1:6379
  singa jobs
  singa logs 3fa2c1 -f
  singa stop 3fa2c1""",
    )
    def submit(
        ctx: typer.Context,
        job: Annotated[str, typer.Argument(metavar="JOB.conf", help="the job to train")],
    ) -> None:
        """Train a job.conf detached from this terminal and print its id.

        Takes every option of `singa train` after JOB.conf. The job keeps running when the
        terminal closes (hang-up, the ssh session ending); `singa jobs` lists it, `singa logs
        ID -f` follows its output, `singa stop ID` stops it with a checkpoint. Jobs are
        recorded in $SINGA_JOBS_DIR (default ~/.singa/jobs).

        With --engine ray and a cluster (--address HEAD:PORT, or RAY_ADDRESS) the job runs on
        the cluster, not on this machine: a supervisor on the head node starts it there and
        the cluster keeps its record, so it outlives this machine, and `singa jobs|logs|stop
        --address HEAD:PORT` see and stop it from any machine with the cluster's token. Its
        paths (job.conf, stores, workspace, this folder) are then the head's."""
        from singa_core.api.jobs import _option, cluster_address, submit_to_cluster
        from singa_core.api.jobs import submit as submit_job
        from singa_core.commands.override_words import override_word_error

        args = list(ctx.args)
        spaced = override_word_error(args)  # -o train_steps 100: the word to write
        if spaced is not None:
            _fail(spaced)
        try:
            engine = _option(args, "--engine")
            cluster = cluster_address(_option(args, "--address"), engine) if engine else None
        except SingaError as err:
            _fail(err)
        if cluster is not None:
            cls, address = cluster
            try:
                rec = submit_to_cluster(cls, address, job, args, "--insecure" in args)
            except SingaError as err:
                _fail(err)
            print(rec["id"])
            a = f" --address {address}"
            print(
                f"submitted '{rec['name']}' to the cluster at {address} (its supervisor runs on "
                f"the head, {rec.get('address', '?')}; workspace {rec['workspace']} there); "
                f"follow it with `singa logs {rec['id']}{a} -f`, stop it with `singa stop "
                f"{rec['id']}{a}`",
                file=sys.stderr,
            )
            return
        try:
            before = _checkpoints_to_move(job, list(ctx.args))
            record = submit_job(job, list(ctx.args))
        except SingaError as err:
            _fail(err)
        print(record.id)
        print(
            f"submitted '{record.name}' (workspace {record.workspace}); follow it with "
            f"`singa logs {record.id} -f`, stop it with `singa stop {record.id}`",
            file=sys.stderr,
        )
        if before is not None:  # the run moves an earlier run's checkpoints aside
            step, name = before
            aside = Path(record.workspace) / "checkpoint.before-<YYYYmmdd-HHMMSS>"
            print(
                f"note: {Path(record.workspace) / 'checkpoint'} holds an earlier run's "
                f"checkpoints (up to step {step}); this run moves them to {aside} (the time "
                f"it starts; `singa logs {record.id}` names the folder): `--checkpoint "
                f"{aside / name}` picks that model for singa predict, test and export",
                file=sys.stderr,
            )

    def _checkpoints_to_move(job: str, args: list[str]):
        """(newest step, its params file name) of the checkpoints a new run of ``job`` (not
        --resume) will move aside from its workspace, or None."""
        from singa_core.api.jobs import job_workspace
        from singa_core.running.checkpoint import latest_checkpoint

        if any(a in ("--resume", "--resume-from") or a.startswith("--resume-from=") for a in args):
            return None
        workspace = job_workspace(job, args)
        found = latest_checkpoint(workspace) if workspace else None
        return None if found is None else (found[0], found[1][0].name)

    @app.command(
        "jobs",
        epilog="""Examples:
  singa jobs
  singa jobs --json""",
    )
    def jobs_command(
        as_json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
        address: AddressOpt = None,
        insecure: InsecureOpt = False,
    ) -> None:
        """List the submitted jobs: id, name, engine, host, state, step of total, the latest
        loss and accuracy, start time and workspace.

        A job is running, finished, stopped (by `singa stop`), or failed with its exit status
        and the last error line; one whose runner and training are gone without an exit
        status (kill -9, a restart) is failed, never running. A job of another machine (a
        shared jobs folder) shows its host and last known state, unchecked; a record that
        cannot be read is listed as damaged, with what is wrong. The step is the one the
        job itself reached, of its own total; the engine is the one it ran with.

        With --address HEAD:PORT (default: RAY_ADDRESS) it lists every singa job of that
        cluster instead, from the cluster's registry: id, name, submitter, node, state, step
        of total, the latest loss and accuracy, workspace, submitted time."""
        from singa_core.api.jobs import cluster_address, list_jobs

        try:
            cluster = cluster_address(address)
        except SingaError as err:
            _fail(err)
        if cluster is not None:
            _cluster_jobs(*cluster, insecure, as_json)
            return
        infos = list_jobs()
        if as_json:
            print(json.dumps([i.as_dict() for i in infos], indent=1))
            return
        if not infos:
            print("no jobs (singa submit JOB.conf starts one)")
            return
        heads = ["id", "name", "engine", "host", "state", "step", "latest", "submitted",
                 "workspace"]  # fmt: skip
        rows = [_row(i) for i in infos]
        widths = [max(len(h), *(len(r[k]) for r in rows)) for k, h in enumerate(heads)]
        print("  ".join(h.ljust(w) for h, w in zip(heads, widths, strict=True)).rstrip())
        for info, row in zip(infos, rows, strict=True):
            print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
            if info.message and (
                info.state != "running"
                or not info.checked
                or info.stopping
                or "runner was killed" in info.message
            ):
                print(f"    {info.message}")

    @app.command(
        epilog="""Examples:
  singa logs 3fa2c1
  singa logs 3f -f""",
    )
    def logs(
        job_id: Annotated[str, typer.Argument(metavar="ID", help="a job id (or a unique prefix)")],
        follow: Annotated[
            bool, typer.Option("--follow", "-f", help="keep printing until the job ends")
        ] = False,
        address: AddressOpt = None,
        insecure: InsecureOpt = False,
    ) -> None:
        """Show a submitted job's output (SINGA's lines); -f follows it. With --address
        HEAD:PORT (default: RAY_ADDRESS), a job of that cluster."""
        from singa_core.api.jobs import cluster_address, find, follow_log

        try:
            cluster = cluster_address(address)
        except SingaError as err:
            _fail(err)
        if cluster is not None:
            _cluster_logs(*cluster, insecure, job_id, follow)
            return
        try:
            folder = find(job_id)
        except SingaError as err:
            _fail(err)
        try:
            for line in follow_log(folder, follow=follow):
                sys.stdout.write(line)
                sys.stdout.flush()
        except SingaError as err:
            _fail(err)
        except KeyboardInterrupt:
            raise typer.Exit(130) from None

    @app.command(
        epilog="""Examples:
  singa stop 3fa2c1
  singa stop 3fa2c1 --now""",
    )
    def stop(
        job_id: Annotated[str, typer.Argument(metavar="ID", help="a job id (or a unique prefix)")],
        now: Annotated[
            bool, typer.Option("--now", help="kill the training at once (no checkpoint)")
        ] = False,
        address: AddressOpt = None,
        insecure: InsecureOpt = False,
    ) -> None:
        """Stop a submitted job: after its current step, with a checkpoint (what SIGTERM
        asks of `singa train`); --now kills it at once. `singa train ... --resume`
        continues a stopped job. With --address HEAD:PORT (default: RAY_ADDRESS), a job of
        that cluster."""
        from singa_core.api.jobs import cluster_address
        from singa_core.api.jobs import stop as stop_job

        try:
            cluster = cluster_address(address)
        except SingaError as err:
            _fail(err)
        if cluster is not None:
            _cluster_stop(*cluster, insecure, job_id, now)
            return
        try:
            result = stop_job(job_id, now=now)
        except SingaError as err:
            _fail(err)
        rec = result.info.record
        if not result.sent:
            print(
                f"job {rec.id} ({rec.name}) is already stopping (a checkpoint first); nothing "
                f"more sent: `singa stop {rec.id} --now` kills it at once",
                file=sys.stderr,
            )
            return
        how = "killing" if now else "stopping (a checkpoint first)"
        print(f"{how} job {rec.id} ({rec.name})", file=sys.stderr)
