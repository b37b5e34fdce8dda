"""A Ctrl-C in the first second of `singa` (while `import typer` runs) ends with
"interrupted" and exit 130, not a KeyboardInterrupt traceback (issue 30)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from conftest import REPO

# a real SIGINT delivered to the process at the moment typer starts to import
SCRIPT = textwrap.dedent(
    """
    import json, os, signal, sys

    def status(key):
        with open("/proc/self/status") as fh:
            return next(x.split()[1] for x in fh if x.startswith(key + ":"))

    # what this process inherited, for the test's message if it fails
    with open(os.environ["STATE_FILE"], "w") as fh:
        json.dump({"SigIgn": status("SigIgn"), "SigBlk": status("SigBlk"),
                   "typer already imported": "typer" in sys.modules}, fh)
    # a terminal's Ctrl-C reaches a process whose SIGINT is neither ignored nor blocked:
    # start from that, whatever the test process passed on (a non-interactive shell starts
    # a background command, `python -m pytest ... &`, with SIGINT ignored, and Python then
    # installs no KeyboardInterrupt handler: the child printed the help and exited 0)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})

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


def test_sigint_while_the_command_line_loads(tmp_path):
    state = tmp_path / "state.json"
    res = subprocess.run(
        [sys.executable, "-c", SCRIPT, "--help"],
        cwd=REPO,
        env={**os.environ, "STATE_FILE": str(state)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    inherited = state.read_text() if state.exists() else "(not written)"
    assert res.returncode == 130, (res.stderr, f"the child's start: {inherited}")
    assert res.stderr.strip() == "interrupted"
    assert "Traceback" not in res.stderr and res.stdout == ""
