"""User-facing errors.

Every mistake a user can make (in job.conf, a data file, a checkpoint, a command-line
argument) is raised as a :class:`SingaError`. The CLI prints it as::

    job.conf:12:5: error: unknown field "checkpoint_frequency" in JobProto
    help: did you mean "checkpoint_freq"?

and exits with status 2, without a Python traceback. Anything else that escapes is a bug
in singa or in a plugin and keeps its traceback.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass

USER_ERROR_EXIT = 2
MAX_LINE = 1000  # characters of one line of an error; the user's text may be huge


@dataclass(frozen=True)
class Location:
    """Where something is: a file, optionally with 1-based line and column."""

    file: str
    line: int | None = None
    col: int | None = None

    def __str__(self) -> str:
        if self.line is None:
            return self.file
        if self.col is None:
            return f"{self.file}:{self.line}"
        return f"{self.file}:{self.line}:{self.col}"


class SingaError(Exception):
    """An error caused by the user's input, with where, what and how to fix it."""

    def __init__(
        self,
        message: str,
        *,
        where: Location | str | None = None,
        help: str | None = None,
        notes: Iterable[str] = (),
        field: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.where = where
        self.help = help
        self.notes = list(notes)
        # the offending field relative to the configuration a plugin was given (an updater's
        # "momentum", an LR change's "inverse_conf.gamma"): whoever built the plugin from
        # that message locates the error at this field's own line (or the -o that set it)
        self.field = field

    def located(self, where: Location | str | None) -> SingaError:
        """Attach a location if the error has none yet; returns self."""
        if self.where is None and where is not None:
            self.where = where
        return self

    def format(self) -> str:
        head = f"{self.where}: error: {self.message}" if self.where else f"error: {self.message}"
        lines = [head]
        lines += [f"note: {n}" for n in self.notes]
        if self.help:
            lines.append(f"help: {self.help}")
        return "\n".join(_cut(line) for line in lines)

    def __str__(self) -> str:
        return self.format()


def _cut(line: str) -> str:
    """A line of at most about MAX_LINE characters (a 1 MB layer name is not echoed)."""
    if len(line) <= MAX_LINE:
        return line
    return f"{line[:MAX_LINE]} ... ({len(line) - MAX_LINE} more characters)"


def did_you_mean(name: str, candidates: Iterable[str], n: int = 3) -> str | None:
    """A 'did you mean' phrase for ``name`` among ``candidates``, or None."""
    cands = list(candidates)
    close = difflib.get_close_matches(name, cands, n=n, cutoff=0.6)
    if not close:
        lowered = {c.lower(): c for c in cands}
        close = difflib.get_close_matches(name.lower(), list(lowered), n=n, cutoff=0.6)
        close = [lowered[c] for c in close]
    if not close:
        return None
    return "did you mean " + " or ".join(f'"{c}"' for c in close) + "?"


class SingaWarning(UserWarning):
    """Something the user should know that does not stop the job (a store whose records
    carry no checksum, ...). The ``singa`` command prints each as one ``warning:`` line
    (once per message); from Python it is an ordinary warning."""


def show_singa_warnings() -> None:
    """Print :class:`SingaWarning` as one ``warning: MESSAGE`` line on stderr (once per
    message), other warnings as Python does; for the ``singa`` command and its processes."""
    import sys
    import warnings

    original = warnings.showwarning
    shown: set[str] = set()  # the same message from two call sites is still one line

    def show(message, category, filename, lineno, file=None, line=None):
        if isinstance(category, type) and issubclass(category, SingaWarning):
            if str(message) in shown:
                return
            shown.add(str(message))
            print(f"warning: {message}", file=file or sys.stderr, flush=True)
        else:
            original(message, category, filename, lineno, file, line)

    warnings.showwarning = show
