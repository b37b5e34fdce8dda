"""A Ctrl-C in the first second of `singa` (while `import typer` runs) ends with
"interrupted" and exit 130, not a KeyboardInterrupt traceback (issue 30)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from conftest import REPO

# a real SIGINT delivered to the process at the moment typer starts to import
SCRIPT = textwrap.dedent(
    """
    import os, signal, sys

    class SignalOnImport:
        def find_spec(self, name, path=None, target=None):
            if name == "typer":
                sys.meta_path.remove(self)
                os.kill(os.getpid(), signal.SIGINT)
            return None

    sys.meta_path.insert(0, SignalOnImport())
    from singa_core.commands.cli import main  # what the console script does
    main()
    """
)


def test_sigint_while_the_command_line_loads():
    res = subprocess.run(
        [sys.executable, "-c", SCRIPT, "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 130, res.stderr
    assert res.stderr.strip() == "interrupted"
    assert "Traceback" not in res.stderr and res.stdout == ""
