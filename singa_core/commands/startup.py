"""The first second of ``singa``: a Ctrl-C while the command line's modules load.

The console script imports :mod:`singa_core.commands.cli`, whose imports (typer, click,
rich) take most of a second; a SIGINT then used to end in a ``KeyboardInterrupt``
traceback from deep inside ``import typer``. :func:`quiet_interrupts` turns it into the
same ending a Ctrl-C has anywhere else outside training: ``interrupted`` on stderr and exit
status 130. Nothing is written while modules load, so nothing is left half done.
"""

from __future__ import annotations

import contextlib
import sys

INTERRUPTED_EXIT = 130


@contextlib.contextmanager
def quiet_interrupts():
    """Within the block, a KeyboardInterrupt becomes ``interrupted`` and SystemExit(130)."""
    try:
        yield
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        raise SystemExit(INTERRUPTED_EXIT) from None
