"""The study folder: Optuna's SQLite storage, the tuner's lock, the study's record, and the
trials read back as records.

::

    STUDY/
      study.db          the Optuna storage (SQLite): every trial, its values, each test
                        pass's objective, its state; a finished trial is committed when it
                        ends, so no crash of the tuner loses it
      study.json        what the study runs: the job.conf and space copied beside it, the
                        folder trials start in, the seed, the -o given (written atomically)
      job.conf, space.conf   the copies every trial (and --resume) uses
      .singa.lock(.json)     the tuner's lock: one tuner per study folder
      trials/NNNN/      trial N's workspace: metrics.jsonl, trial.log, checkpoint/
      best.conf         the best trial's job.conf
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from singa_core.contracts.errors import SingaError
from singa_core.running.fileio import atomic_write_bytes

RECORD = "study.json"
DB = "study.db"
TUNE_EXTRA_HELP = "pip install 'singa-classic[tune]' (Optuna)"


def import_optuna():
    """Optuna, quiet (its per-trial log lines are the tuner's to show); a located error
    naming the extra when it is missing."""
    try:
        import optuna
    except ImportError:
        raise SingaError(
            "singa tune needs Optuna, which is not installed",
            where="singa tune",
            help=TUNE_EXTRA_HELP,
        ) from None
    import warnings

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", module="optuna")
    return optuna


def storage_url(folder: Path) -> str:
    return f"sqlite:///{(Path(folder) / DB).resolve()}"


def open_storage(folder: Path):
    optuna = import_optuna()
    try:
        return optuna.storages.RDBStorage(
            storage_url(folder), engine_kwargs={"connect_args": {"timeout": 60}}
        )
    except Exception as exc:  # noqa: BLE001 - SQLAlchemy's errors: a damaged or locked file
        raise SingaError(
            f"cannot open the study's storage {Path(folder) / DB}: {exc}".splitlines()[0],
            where=str(folder),
            help="check the folder; a study.db that is not an Optuna SQLite store cannot be "
            "used (move it away and start the study again)",
        ) from None


def is_study(folder: Path) -> bool:
    return (Path(folder) / RECORD).is_file()


@dataclass
class StudyRecord:
    """What study.json holds."""

    name: str
    job: str  # the job.conf copied into the study folder
    space: str  # the space file copied into the study folder
    source_job: str  # where they were copied from
    source_space: str
    cwd: str  # the folder trials start in (job.conf's relative paths)
    seed: int
    overrides: list[str] = field(default_factory=list)
    engine: str | None = None
    trials: int | None = None  # the budget --trials gave (else the space's)
    created: float = 0.0
    version: int = 1

    def write(self, folder: Path) -> None:
        data = json.dumps(asdict(self), indent=1, sort_keys=True) + "\n"
        atomic_write_bytes(Path(folder) / RECORD, data.encode(), "study record")

    @classmethod
    def read(cls, folder: Path) -> StudyRecord:
        path = Path(folder) / RECORD
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            return cls(**{k: doc[k] for k in cls.__dataclass_fields__ if k in doc})
        except FileNotFoundError:
            raise SingaError(
                f"{folder} holds no study (no {RECORD})",
                where=str(folder),
                help="give the folder `singa tune` made (--study DIR; default: "
                "WORKSPACE/tune-SPACE)",
            ) from None
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise SingaError(
                f"the study record {path} cannot be read: {exc}",
                where=str(path),
                help="it is written atomically by `singa tune`; a hand-edited or damaged "
                "record cannot be used",
            ) from None


@dataclass
class TrialRecord:
    """One trial of a study, as ``singa tune --show --json`` lists it.

    ``state``: ``complete``, ``pruned`` (stopped early), ``failed`` (``reason`` says why),
    ``running`` (its tuner is alive), ``interrupted`` (its tuner is gone: ``--resume``
    continues it), ``waiting``. ``value``: the objective; ``step``: the last step it
    reported (or trained to); ``curve``: the objective at each test pass."""

    number: int
    state: str
    params: dict
    value: float | None
    step: int | None
    seconds: float | None
    seed: int | None
    workspace: str | None
    threads: int | None = None
    node: str | None = None
    reason: str | None = None
    curve: list[tuple[int, float]] = field(default_factory=list)

    def as_dict(self) -> dict:
        d = asdict(self)
        d["curve"] = [[s, v] for s, v in self.curve]
        return d


def _state(trial, tuner_alive: bool) -> str:
    name = trial.state.name
    if name == "RUNNING":
        return "running" if tuner_alive else "interrupted"
    return {"COMPLETE": "complete", "PRUNED": "pruned", "FAIL": "failed"}.get(name, name.lower())


def trial_records(study, tuner_alive: bool) -> list[TrialRecord]:
    out = []
    for t in study.get_trials(deepcopy=False):
        attrs = t.user_attrs
        curve = sorted((int(s), float(v)) for s, v in t.intermediate_values.items())
        seconds = attrs.get("seconds")
        if seconds is None and t.datetime_start is not None:
            end = t.datetime_complete.timestamp() if t.datetime_complete else time.time()
            seconds = end - t.datetime_start.timestamp()
        out.append(
            TrialRecord(
                number=t.number,
                state=_state(t, tuner_alive),
                params={k: attrs.get("texts", {}).get(k, v) for k, v in t.params.items()},
                value=t.value if t.state.name == "COMPLETE" else None,
                step=attrs.get("final_step", curve[-1][0] if curve else None),
                seconds=None if seconds is None else round(float(seconds), 3),
                seed=attrs.get("seed"),
                workspace=attrs.get("workspace"),
                threads=attrs.get("threads"),
                node=attrs.get("node"),
                reason=attrs.get("reason"),
                curve=curve,
            )
        )
    return out


def tuner_alive(folder: Path) -> bool:
    """Whether a tuner holds the study folder's lock now (tested without taking it)."""
    import fcntl

    from singa_core.running.workspace import LOCK_NAME

    path = Path(folder) / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)  # closing drops the shared lock at once
    return False
