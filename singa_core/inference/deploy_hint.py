"""What to predict with instead, when a job.conf's net cannot be deployed.

Some training jobs have no net to predict with: char-rnn's unrolled training net (an output
per time step; its sampling net is ``sample.conf``), the RBM stack's ``rbm1..4.conf``
(layers without deploy behaviour; the network they pretrain predicts through
``autoencoder.conf``). Those companions sit beside the job.conf. :func:`add_sibling_hint`
finds, among the ``.conf`` files in the job.conf's folder, the ones whose deploy net can be
built, and names them in the refusal's ``help:`` line.
"""

from __future__ import annotations

from pathlib import Path

from singa_core.contracts.errors import SingaError

#: at most this many files of the folder are tried
MAX_SIBLINGS = 24


def deployable_siblings(conf_path: str | Path, get_plugin) -> list[Path]:
    """The other ``*.conf`` files in ``conf_path``'s folder whose deploy net builds."""
    from singa_core.jobconf.parse import load_job
    from singa_core.netbuilder.deploy import deploy_job

    here = Path(conf_path)
    found = []
    try:
        candidates = sorted(here.parent.glob("*.conf"))[:MAX_SIBLINGS]
    except OSError:
        return []
    for other in candidates:
        if other.name == here.name:
            continue
        try:
            cfg = load_job(other)
            deploy_job(cfg.job, get_plugin, cfg.locate)
        except (SingaError, OSError, ValueError):
            continue
        found.append(other)
    return found


def add_sibling_hint(err: SingaError, conf_path, get_plugin) -> SingaError:
    """``err`` (a deploy refusal) with the deployable job.confs beside ``conf_path`` named
    in its help line; returns it."""
    if not conf_path:
        return err
    siblings = deployable_siblings(conf_path, get_plugin)
    if siblings:
        listed = " or ".join(str(p) for p in siblings)
        hint = f"{listed} beside it deploys: predict and export with that job.conf"
        err.help = f"{err.help}; {hint}" if err.help else hint
    return err
