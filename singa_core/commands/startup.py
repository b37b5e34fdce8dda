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


def restore_interrupts() -> None:
    """Give SIGINT back to Python's KeyboardInterrupt once the command runs (the training
    loop and every command handle that), replacing the handler ``singa_core/__init__``
    installs for the time the command loads (a Ctrl-C then: ``interrupted``, exit 130)."""
    import signal

    handler = signal.getsignal(signal.SIGINT)
    if getattr(handler, "__name__", "") == "_interrupted_while_loading":
        signal.signal(signal.SIGINT, signal.default_int_handler)
