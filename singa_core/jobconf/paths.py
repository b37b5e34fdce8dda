"""The working folder a job.conf's relative input paths need.

Relative paths in job.conf (a data layer's store, its mean file, ``checkpoint_path``) start
from the folder ``singa`` runs in, as in SINGA 0.3; the examples name theirs from the
repository root (``examples/mnist/train_data.bin``). Run from another folder (``cd
examples/mnist && singa train job.conf``), the store is missing and the reader's error
would say to make the data, which exist. :func:`check_working_folder` notices the case: an
input path missing from here that exists from a folder above is a located error naming
that folder.
"""

from __future__ import annotations

import os
from pathlib import Path

from singa_core.contracts.errors import SingaError

#: string fields of a data layer's messages that name files it reads
_INPUT_FIELDS = {"path", "mean_file", "std_file", "meanfile", "backup_path"}
#: how many folders up to look
_LEVELS = 6


def _layer_inputs(job):
    """(field path, value) of the files the net's input layers (those without sources)
    read: only they are inputs; a writer layer (with sources) names files it makes."""
    for i, layer in enumerate(job.neuralnet.layer):
        if len(layer.srclayers):
            continue
        for fd, sub in layer.ListFields():
            if not hasattr(sub, "ListFields"):  # a scalar or a repeated field
                continue
            for inner, value in sub.ListFields():
                if inner.name in _INPUT_FIELDS and isinstance(value, str) and value:
                    yield f"neuralnet.layer[{i}].{fd.name}.{inner.name}", value
    for i, value in enumerate(job.checkpoint_path):
        yield f"checkpoint_path[{i}]", value


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except (OSError, ValueError):  # too long for the filesystem, a NUL byte: not there
        return False


def check_working_folder(cfg, cwd: Path | None = None) -> None:
    """A SingaError when an input path of ``cfg`` is relative, missing from ``cwd`` (default:
    the current folder) and present from one of the folders above it."""
    here = Path.cwd() if cwd is None else Path(cwd)
    for field, value in _layer_inputs(cfg.job):
        rel = Path(value)
        if rel.is_absolute() or _exists(here / rel):
            continue
        for up in list(here.parents)[:_LEVELS]:
            if _exists(up / rel):
                back = os.path.relpath(up, here)
                raise SingaError(
                    f"{value} is not there from {here}, but is from {up}: relative paths in "
                    "job.conf start from the folder singa runs in",
                    where=cfg.locate(field),
                    help=f"run singa from {up} (cd {back}), or give the path as "
                    f"{os.path.relpath(up / rel, here)} or {up / rel}",
                )
