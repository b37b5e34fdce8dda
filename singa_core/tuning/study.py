"""The tuner: a study over a job.conf's fields, its trials run as singa jobs.

::

    from singa_core.tuning import create_study, open_study

    study = create_study("examples/mnist/job.conf", "examples/mnist/tune.conf",
                         folder="runs/mnist-study", seed=1)
    result = study.run(trials=8)           # the live table on stderr; best.conf written
    for t in open_study("runs/mnist-study").trials():
        print(t.number, t.state, t.params, t.value)

The loop asks Optuna for a trial's values (the sampler seeded with the study's seed and
the trial's number), starts ``singa train`` with them (a :class:`~.launch.TrialLaunch`)
as soon as a slot is free, reads each test pass from the trial's metrics.jsonl, reports the
objective to the study and stops the trial (SIGTERM: a checkpoint, exit 143) when the
early-stopping rule says so, and tells the study how each trial ended: complete (its
objective), pruned, or failed (the error its log ends with); a failing trial never ends
the study. Everything is in the study's SQLite storage as it happens.

A trial lost with its node (a cluster's actor gone, not an exit of its own) is recorded as
failed, naming the node, and its values run again as a new trial from step 0 in a fresh
workspace, beyond the budget. A Ctrl-C or SIGTERM stops every trial with a checkpoint and
leaves them running in the store; ``--resume`` (:func:`resume_study`) continues each from
its checkpoint (or from step 0 when it wrote none), then starts new trials up to the
budget. A ``kill -9`` of the
tuner loses nothing either: its trials get SIGTERM from the kernel and checkpoint.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import singa_core.tuning.results as results
import singa_core.tuning.search as search
from singa_core.contracts.errors import SingaError
from singa_core.running.fileio import atomic_write_bytes
from singa_core.tuning.launch import LocalTrials, TrialLaunch
from singa_core.tuning.store import (
    DB,
    StudyRecord,
    import_optuna,
    is_study,
    open_storage,
    trial_records,
    tuner_alive,
)

POLL_SECONDS = 0.2
LOCK_WAIT_SECONDS = 60.0  # a trial the tuner's death stopped may still be checkpointing


@dataclass
class StudyResult:
    """What :meth:`Study.run` returns."""

    records: list
    best: object | None  # a TrialRecord
    best_conf: Path | None
    pruned: list[int] = field(default_factory=list)
    freed: int = 0
    interrupted: bool = False
    stop_signal: int | None = None
    lines: list[str] = field(default_factory=list)  # what the end of the run said

    def summary(self) -> str:
        return "\n".join(self.lines)


@dataclass
class _Running:
    trial: object  # optuna.Trial
    launch: TrialLaunch
    handle: object
    started: float
    prior_seconds: float = 0.0
    reported: dict = field(default_factory=dict)
    last_step: int | None = None
    reason: str | None = None  # why the tuner stopped it: "early", "time", "interrupt"
    phase_seen: bool = False


def default_folder(cfg, space_path: str | Path) -> Path:
    j = cfg.job
    ws = j.cluster.workspace if j.cluster.HasField("workspace") else "."
    return Path(ws) / f"tune-{Path(space_path).stem}"


def _lock(folder: Path, what: str):
    from singa_core.running.workspace import WorkspaceLock, _holder_text, read_holder

    try:
        return WorkspaceLock(folder).acquire(what)
    except SingaError as err:
        if "in use" not in err.message:
            raise
        holder = read_holder(folder)
        raise SingaError(
            f"the study {folder} is in use by another tuner: {_holder_text(holder)}",
            where=str(folder),
            notes=[f"its lock is {folder}/.singa.lock; it is released when that process ends"],
            help=f"follow it with `singa tune --show {folder}`, stop it (kill -TERM "
            f"{(holder or {}).get('pid', 'PID')}: its trials checkpoint), or give this study "
            "another folder (--study DIR)",
        ) from None


def _load(record: StudyRecord, folder: Path, host=None, check_job: bool = False):
    """The study's job.conf and space (its own copies), checked."""
    from singa_core.jobconf.parse import load_job
    from singa_core.tuning.space import load_space

    here = os.getcwd()
    try:
        os.chdir(record.cwd)  # job.conf's relative paths start where the study started
    except OSError as exc:
        raise SingaError(
            f"the folder the study started in, {record.cwd}, is gone: {exc.strerror}",
            where=str(folder / "study.json"),
            help="trials start there (job.conf's relative paths): restore it",
        ) from None
    try:
        cfg = load_job(record.job, record.overrides)
        space = load_space(
            record.space, cfg, host if check_job else None, workspace=str(folder / "trials")
        )
    finally:
        os.chdir(here)
    return cfg, space


def create_study(
    job: str | Path,
    space_path: str | Path,
    folder: str | Path | None = None,
    *,
    seed: int | None = None,
    overrides: list[str] | tuple = (),
    err=None,
) -> Study:
    """Check the job and the space, then make the study folder (see :mod:`.store`);
    returns the :class:`Study`, holding the folder's lock. Every mistake is a SingaError
    before anything is written."""
    from singa_core.jobconf.parse import load_job
    from singa_core.plugin_host.host import get_host
    from singa_core.tuning.space import load_space

    import_optuna()  # the extra's error first
    err = err or sys.stderr
    cfg = load_job(job, list(overrides))
    folder = Path(folder) if folder is not None else default_folder(cfg, space_path)
    if folder.exists() and not folder.is_dir():
        raise SingaError(
            f"{folder} is not a folder", where="--study", help="give a folder for the study"
        )
    if is_study(folder) or (folder / DB).exists():
        raise SingaError(
            f"{folder} already holds a study",
            where=str(folder),
            help=f"continue it: singa tune --resume --study {folder} (see it: singa tune "
            f"--show {folder}), or give this one another folder (--study DIR)",
        )
    host = get_host()
    for f in host.failures:
        print(f.warning(), file=err)
    space = load_space(space_path, cfg, host, workspace=str(folder / "trials"))
    lock = _lock(folder, " ".join(["singa tune", str(job), str(space_path)])[:300])
    try:
        (folder / "trials").mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(folder / "job.conf", Path(job).read_bytes(), "study's job.conf")
        atomic_write_bytes(folder / "space.conf", space.text.encode(), "study's space file")
        name = space.proto.name or cfg.job.name or Path(job).stem
        record = StudyRecord(
            name=name,
            job=str((folder / "job.conf").resolve()),
            space=str((folder / "space.conf").resolve()),
            source_job=str(Path(job).resolve()),
            source_space=str(Path(space_path).resolve()),
            cwd=os.getcwd(),
            seed=int(seed) if seed is not None else (int(cfg.job.seed) if cfg.job.seed else 0),
            overrides=list(overrides),
            created=round(time.time(), 3),
        )
        optuna = import_optuna()
        optuna.create_study(
            storage=open_storage(folder),
            study_name=name,
            direction="maximize" if space.objective.maximize else "minimize",
        )
        record.write(folder)
    except BaseException:
        lock.release()
        raise
    return Study(folder, record, cfg, space, lock=lock, err=err)


def resume_study(folder: str | Path, err=None) -> Study:
    """The study in ``folder``, locked, its job and space checked again."""
    from singa_core.plugin_host.host import get_host

    import_optuna()
    folder = Path(folder)
    record = StudyRecord.read(folder)
    lock = _lock(folder, f"singa tune --resume --study {folder}")
    try:
        cfg, space = _load(record, folder, get_host(), check_job=True)
    except BaseException:
        lock.release()
        raise
    return Study(folder, record, cfg, space, lock=lock, err=err)


def open_study(folder: str | Path) -> Study:
    """A study to read (its trials, its best), running or not; takes no lock."""
    import_optuna()
    folder = Path(folder)
    if not folder.is_dir():
        raise SingaError(
            f"no study folder {folder}",
            where=str(folder),
            help="give the folder `singa tune` made (--study DIR)",
        )
    record = StudyRecord.read(folder)
    cfg, space = _load(record, folder)
    return Study(folder, record, cfg, space)


#: a trial's user attribute: it was lost with its node (its values were run again)
LOST = "lost"


class Study:
    """A study folder (see :mod:`singa_core.tuning.store`); made by :func:`create_study`,
    :func:`resume_study` or :func:`open_study`."""

    def __init__(self, folder: Path, record: StudyRecord, cfg, space, *, lock=None, err=None):
        self.folder = Path(folder)
        self.record = record
        self.cfg = cfg
        self.space = space
        self.lock = lock
        self.err = err or sys.stderr
        self._stop_signal: int | None = None
        self._bad_metric: str | None = None
        self._train_steps = 0

    # -- reading ---------------------------------------------------------------------------
    def optuna_study(self):
        optuna = import_optuna()
        try:
            return optuna.load_study(study_name=self.record.name, storage=open_storage(self.folder))
        except KeyError:
            raise SingaError(
                f"the storage {self.folder / DB} holds no study {self.record.name!r}",
                where=str(self.folder / DB),
                help="the study's storage was replaced or damaged; start the study again in "
                "another folder",
            ) from None

    def trials(self) -> list:
        """Every trial as a :class:`~singa_core.tuning.store.TrialRecord`."""
        alive = self.lock is not None or tuner_alive(self.folder)
        return trial_records(self.optuna_study(), alive)

    def best(self, n: int = 1):
        found = results.best_records(self.space, self.trials(), n)
        return (found[0] if found else None) if n == 1 else found

    def close(self) -> None:
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    # -- running ---------------------------------------------------------------------------
    def run(
        self,
        *,
        trials: int | None = None,
        parallel: int | None = None,
        threads: int | None = None,
        keep: int = 3,
        runner=None,
        live: bool | None = None,
    ) -> StudyResult:
        """Run trials up to the budget (``trials``, default the space's) and write
        best.conf; see the module docstring. ``runner``: where trials run (default: this
        machine, :class:`~.launch.LocalTrials`); ``parallel``: trials at once (default:
        what the runner has room for); ``threads``: BLAS threads of each trial (default:
        the CPUs shared among the parallel trials)."""
        from singa_core.contracts.resources import usable_cpus

        if self.lock is None:
            raise SingaError(
                "this study was opened to read",
                where=str(self.folder),
                help="use create_study or resume_study to run trials",
            )
        optuna = import_optuna()
        study = self.optuna_study()
        space = self.space
        if trials is not None and trials != self.record.trials:
            self.record.trials = int(trials)  # a --resume without --trials keeps it
            self.record.write(self.folder)
        target = int(self.record.trials or space.trials)
        runner = runner or LocalTrials(usable_cpus())
        slots = max(1, runner.slots())
        pending = len([t for t in study.get_trials(deepcopy=False)
                       if t.state.name in ("RUNNING", "WAITING")])  # fmt: skip
        parallel = int(parallel) if parallel else max(1, min(slots, target, 64) or pending)
        if threads is None:
            threads = max(1, slots // parallel) if isinstance(runner, LocalTrials) else 1
        train_steps = space.train_steps or int(self.cfg.job.train_steps)
        self._train_steps = train_steps  # the last pass is never a reason to stop
        study.pruner = search.pruner(space, train_steps)
        dists = {d.field: d.distribution() for d in space.dims}
        table = results.LiveTable(space, self.err, live)
        print(
            f"study {self.record.name} in {self.folder}: {space.objective.describe()}; "
            f"{search.describe(space)}; {target} trials, {parallel} at a time on "
            f"{runner.where}, {threads} BLAS thread(s) each; seed {self.record.seed}",
            file=self.err,
            flush=True,
        )
        running: dict[int, _Running] = {}
        old = self._install_signals()
        t0 = time.monotonic()
        try:
            with runner:
                for t in study.get_trials(
                    deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)
                ):
                    self._start(study, optuna.Trial(study, t._trial_id), runner, threads, running,
                                again=True)  # fmt: skip
                while True:
                    out_of_time = (
                        space.study_seconds is not None
                        and time.monotonic() - t0 > space.study_seconds
                    )
                    while (self._stop_signal is None and self._bad_metric is None
                           and not out_of_time and len(running) < parallel):  # fmt: skip
                        made = study.get_trials(deepcopy=False)
                        number = len(made)
                        lost = sum(1 for t in made if t.user_attrs.get(LOST))
                        if number >= target + lost:  # a lost trial's rerun is not budget
                            break
                        study.sampler = search.sampler(space, self.record.seed, number)
                        trial = study.ask(dists)
                        self._start(study, trial, runner, threads, running)
                    caught = getattr(runner, "caught_signal", None)
                    if self._stop_signal is None and caught is not None and caught():
                        self._stop_signal = caught()  # the runner's own handler took it
                    if self._stop_signal is not None:
                        for r in running.values():
                            r.reason = r.reason or "interrupt"
                            r.handle.stop()
                    if not running:
                        break
                    for number in list(running):
                        if self._watch(study, running[number]):
                            del running[number]
                    table.update(trial_records(study, True))
                    time.sleep(POLL_SECONDS)
        finally:
            self._restore_signals(old)
            for r in running.values():  # an error in the loop itself: no trial left behind
                r.handle.stop()
        records = trial_records(study, True)
        table.update(records, force=True)
        table.close()
        if self._bad_metric is not None:
            raise SingaError(
                self._bad_metric,
                where=self.space.locate("objective.metric"),
                help="name a metric the test net's layers report (the trial's metrics.jsonl "
                "shows them), e.g. accuracy or loss",
            )
        return self._finish(records, keep)

    def _start(self, study, trial, runner, threads, running, again: bool = False) -> None:
        from singa_core.running.checkpoint import latest_checkpoint

        number = trial.number
        ws = self.folder / "trials" / f"{number:04d}"
        params = trial.params
        resume = False
        if again:
            self._wait_for_workspace(ws)
            resume = latest_checkpoint(ws) is not None
            if not resume and ws.exists():
                shutil.rmtree(ws, ignore_errors=True)  # rerun cleanly from step 0
        launch = TrialLaunch(
            number=number,
            conf=self.record.job,
            overrides=[*self.record.overrides, *self.space.overrides(params)],
            workspace=str(ws.resolve()),
            seed=self.record.seed,
            threads=int(threads),
            cwd=self.record.cwd,
            resume=resume,
        )
        texts = {d.field: d.text(params[d.field]) for d in self.space.dims if d.field in params}
        prior = float(trial.user_attrs.get("seconds", 0.0)) if again else 0.0
        for key, value in (("workspace", launch.workspace), ("seed", launch.seed),
                           ("threads", launch.threads), ("texts", texts)):  # fmt: skip
            trial.set_user_attr(key, value)
        try:
            handle = runner.start(launch)
        except SingaError as err:
            self._fail(study, trial, f"could not start: {err.message}")
            return
        trial.set_user_attr("node", getattr(handle, "node", None))
        r = _Running(trial, launch, handle, time.monotonic(), prior_seconds=prior)
        if again:
            r.reported = {int(s): v for s, v in trial.storage.get_trial(
                trial._trial_id).intermediate_values.items()}  # fmt: skip
        running[number] = r

    @staticmethod
    def _wait_for_workspace(ws: Path) -> None:
        from singa_core.running.workspace import WorkspaceLock

        if not ws.is_dir():
            return
        deadline = time.monotonic() + LOCK_WAIT_SECONDS
        while True:
            try:
                WorkspaceLock(ws).acquire("singa tune (waiting for a stopped trial)").release()
                return
            except SingaError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def _fail(self, study, trial, reason: str) -> None:
        optuna = import_optuna()
        trial.set_user_attr("reason", reason)
        study.tell(trial, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)

    def _watch(self, study, r: _Running) -> bool:
        """Read the trial's new passes, stop it when weak or out of time; True once it
        has ended (and the study was told)."""
        optuna = import_optuna()
        space = self.space
        obj = space.objective
        code = r.handle.poll()  # before reading: every record of an ended trial is read
        for rec in r.handle.records():
            step = rec.get("step")
            if isinstance(step, int) and "phase" in rec:
                r.last_step = step if r.last_step is None else max(r.last_step, step)
            if rec.get("phase") != obj.phase or not isinstance(step, int):
                continue
            if obj.metric not in rec:
                if not r.phase_seen:
                    names = [k for k in rec if k not in ("phase", "step", "time", "non_finite")]
                    self._bad_metric = (
                        f"the {obj.phase} passes report no metric {obj.metric!r} (they report "
                        f"{', '.join(names) or 'none'})"
                    )
                    r.reason = "bad metric"
                    r.handle.stop()
                continue
            r.phase_seen = True
            value = rec[obj.metric]
            if value is None or step in r.reported:  # non-finite: the trial fails (exit 3)
                continue
            r.reported[step] = float(value)
            r.trial.report(float(value), step)
            if (r.reason is None and 0 < step < self._train_steps
                    and r.trial.should_prune()):  # fmt: skip
                r.reason = "early"
                r.handle.stop()
        elapsed = time.monotonic() - r.started
        if (code is None and r.reason is None and space.trial_seconds is not None
                and elapsed > space.trial_seconds):  # fmt: skip
            r.reason = "time"
            r.handle.stop()
        if code is None:
            return False
        reason = r.handle.reason(code) if code not in (0, 130, 143) else None
        close = getattr(r.handle, "close", None)
        if close is not None:
            close()  # a cluster's trial frees its CPUs for the next
        t = r.trial
        t.set_user_attr("seconds", round(r.prior_seconds + elapsed, 3))
        if r.last_step is not None:
            t.set_user_attr("final_step", r.last_step)
        values = [v for _, v in sorted(r.reported.items())]
        if r.reason == "interrupt":
            return True  # left running in the store: --resume continues it
        if r.reason == "early":
            t.set_user_attr("reason", f"stopped early at step {r.last_step}")
            study.tell(t, state=optuna.trial.TrialState.PRUNED, skip_if_finished=True)
        elif r.reason == "bad metric":
            self._fail(study, t, self._bad_metric or "no such metric")
        elif code == 0 or (r.reason == "time" and code in (130, 143)):
            if not values:
                self._fail(study, t, f"its {obj.phase} passes reported no {obj.metric}")
            else:
                pick = max if obj.maximize else min
                value = values[-1] if obj.at == "last" else pick(values)
                if r.reason == "time":
                    t.set_user_attr("reason", f"stopped at its time limit, step {r.last_step}")
                study.tell(t, value, skip_if_finished=True)
        elif getattr(r.handle, "lost", False):  # its node went: rerun the values cleanly
            study.enqueue_trial(dict(t.params), user_attrs={"rerun_of": t.number})
            t.set_user_attr(LOST, True)
            self._fail(study, t, f"{reason or f'exit {code}'}; its values run again as a "
                       "new trial from step 0")  # fmt: skip
        else:
            self._fail(study, t, reason or f"exit {code}")
        return True

    def _install_signals(self):
        def stop(signum, frame):
            if self._stop_signal is None:
                self._stop_signal = signum
                print(
                    f"\n{signal.Signals(signum).name}: stopping every trial with a "
                    "checkpoint (continue with --resume)",
                    file=self.err,
                    flush=True,
                )

        try:
            return {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
        except ValueError:  # not the main thread: the caller handles signals
            return {}

    @staticmethod
    def _restore_signals(old) -> None:
        for s, h in old.items():
            signal.signal(s, h)

    def _finish(self, records, keep: int) -> StudyResult:
        space = self.space
        res = StudyResult(records, None, None, stop_signal=self._stop_signal)
        res.interrupted = self._stop_signal is not None
        counts = {}
        for r in records:
            counts[r.state] = counts.get(r.state, 0) + 1
        said = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
        res.lines.append(f"study {self.record.name}: {len(records)} trials ({said})")
        best = results.best_records(space, records, 5)
        if best:
            heads, rows = results.table_rows(space, best)
            res.lines.append("best trials:")
            res.lines += ["  " + line for line in results.format_table(heads, rows)]
            res.best = best[0]
            threads = best[0].threads or 1
            note = (
                f"retrain: OPENBLAS_NUM_THREADS={threads} singa train "
                f"{self.folder / 'best.conf'} --seed {best[0].seed}"
            )
            text = results.best_conf_text(self.cfg, space, best[0], self.folder, note)
            path = self.folder / "best.conf"
            results.write_best_conf(path, text)
            res.best_conf = path
            res.lines.append(f"wrote {path} (trial {best[0].number}); {note}")
        else:
            res.lines.append("no trial completed: no best.conf")
        if not res.interrupted:
            res.pruned, res.freed = results.prune_workspaces(space, records, keep)
            if res.pruned:
                shown = ", ".join(map(str, res.pruned[:20])) + (" ..." if len(res.pruned) > 20
                                                                  else "")  # fmt: skip
                res.lines.append(
                    f"pruned the checkpoints of {len(res.pruned)} trial(s) outside the best "
                    f"{keep} ({results.size_text(res.freed)}): {shown}; their metrics.jsonl and "
                    "trial.log stay"
                )
        else:
            left = [r.number for r in records if r.state in ("running", "interrupted")]
            res.lines.append(
                f"interrupted: trials {', '.join(map(str, left)) or 'none'} stopped with a "
                f"checkpoint; continue with: singa tune --resume --study {self.folder}"
            )
        return res
