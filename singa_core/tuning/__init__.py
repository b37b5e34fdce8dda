"""Searching a job.conf's fields: ``singa tune JOB.conf SPACE`` and its Python API.

* ``space.py``: the search-space file (``singa.tune.TuneProto`` in protobuf text, beside
  job.conf) parsed and checked against the job.conf before trial 0 — every path, value and
  bound, and the job itself at the space's corners — with ``FILE:LINE:COL`` errors;
* ``store.py``: the study folder: the Optuna SQLite storage, the tuner's lock, the study's
  record (``study.json``) and the trials read back as :class:`TrialRecord` s;
* ``search.py``: samplers (TPE, random) and early-stopping rules (median, ASHA, Hyperband)
  made from the space;
* ``launch.py``: a trial as a process: the ``singa train`` command line of a trial, run on
  this machine (:class:`LocalTrials`); an engine may run them elsewhere
  (``Engine.trial_runner``: Ray places them on a cluster's free nodes);
* ``study.py``: the tuner's loop (:class:`Study`): ask, launch, watch each test pass,
  stop weak trials, tell, resume;
* ``results.py``: the live table, the best trials, ``best.conf``, pruning workspaces.

Optuna (the ``tune`` extra) is imported only here and only when a study is used; the core
runs without it. This room imports contracts, schema, plugin_host, jobconf and running;
never api, commands or testing.
"""

from __future__ import annotations

__all__ = ["Study", "TrialRecord", "create_study", "open_study", "resume_study"]


def __getattr__(name: str):
    if name in ("Study", "StudyResult", "create_study", "open_study", "resume_study"):
        from singa_core.tuning import study

        return getattr(study, name)
    if name == "TrialRecord":
        from singa_core.tuning.store import TrialRecord

        return TrialRecord
    raise AttributeError(f"module 'singa_core.tuning' has no attribute {name!r}")
