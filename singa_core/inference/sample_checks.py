"""Checks of what ``singa predict`` was given, before the model runs.

* :func:`refuse_special_file`: an input path that exists but is no regular file (a FIFO,
  a socket, a device such as ``/dev/stdin``) is refused by name: predict reads its inputs
  as files (a store by memory map, an ``.npz`` by seeking), which a stream cannot do;
* :func:`check_samples`: an input that holds no samples (an ``(0, 784)`` array, an empty
  CSV or store) is refused, naming the file; a NaN or infinite value is refused naming the
  sample (``FILE[i]``) and the position of the first bad value, instead of a prediction of
  ``0 (nan)``.
"""

from __future__ import annotations

import stat
from pathlib import Path

import numpy as np

from singa_core.contracts.errors import SingaError

_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def refuse_special_file(path: Path) -> None:
    """A SingaError when ``path`` exists and is neither a regular file nor a folder."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return  # missing or unreadable: the reader's own error names it
    kind = next((name for test, name in _KINDS if test(mode)), None)
    if kind is None:
        return
    raise SingaError(
        f"input is {kind}, not a file: singa predict reads each input as a file (a store "
        "by memory map, an .npz by seeking in it), which a stream cannot give",
        where=str(path),
        help=f"save the data to a file first (e.g. `cat {path} > input.npy`) and give that",
    )


def check_samples(names: list[str], samples: np.ndarray, where: str) -> None:
    """Refuse an input (``where``: its path) whose ``samples`` (``(N, ...)``, named by
    ``names``) are none, or hold a NaN or an infinite value."""
    if len(samples) == 0:
        raise SingaError(
            f"input holds no samples (an array of shape {tuple(samples.shape)})",
            where=where,
            help="give at least one sample per input file",
        )
    if samples.dtype.kind != "f":
        return  # integers are always finite
    flat = samples.reshape(len(samples), -1)
    finite = np.isfinite(flat)
    if finite.all():
        return
    bad = np.flatnonzero(~finite.all(axis=1))
    first = int(bad[0])
    col = int(np.flatnonzero(~finite[first])[0])
    value = flat[first, col]
    more = f" (and {len(bad) - 1} more sample(s))" if len(bad) > 1 else ""
    raise SingaError(
        f"sample {names[first]} holds {value} at value index {col}{more}: the model "
        "cannot predict from a non-finite value",
        where=where,
        help="replace the missing or infinite values (e.g. numpy.nan_to_num), or drop "
        "those samples",
    )
