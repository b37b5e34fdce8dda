"""A Ctrl-C at any moment of `singa`'s start-up — while ``singa_core/__init__`` runs, while
pluggy, typer or the command line load, or in ``main`` before the command starts — ends in
one line, ``interrupted``, and exit 130 (issue 38, point 3). The console script itself is
run (a copy of the one pip writes, named ``singa``), and so is ``python -m``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest
from conftest import REPO

# the moment: a real SIGINT when the named module starts to import
PRELUDE = textwrap.dedent(
    """
    import os, signal, sys
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as a terminal starts it
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})

    class SignalOnImport:
        def find_spec(self, name, path=None, target=None):
            if name == os.environ["SIGINT_AT"]:
                sys.meta_path.remove(self)
                os.kill(os.getpid(), signal.SIGINT)
            return None

    sys.meta_path.insert(0, SignalOnImport())
    """
)

# what pip's console script does (see .venv/bin/singa)
CONSOLE_SCRIPT = textwrap.dedent(
    """
    import sys
    from singa_core.commands.cli import main
    if __name__ == '__main__':
        sys.argv[0] = sys.argv[0].removesuffix('.exe')
        sys.exit(main())
    """
)

MOMENTS = [
    "pluggy",  # in singa_core/__init__; issue 38: the traceback seen at load 18
    "pluggy._manager",  # the last module pluggy loads, still inside singa_core/__init__
    "singa_core.commands",
    "typer",
    "singa_core.jobconf.legacy",  # in main(), before the command runs
]


@pytest.mark.parametrize("module", MOMENTS)
def test_sigint_while_the_console_script_loads(tmp_path, module):
    script = tmp_path / "singa"
    script.write_text(PRELUDE + CONSOLE_SCRIPT)
    res = subprocess.run(
        [sys.executable, str(script), "list-plugins"],
        cwd=REPO,
        env={**os.environ, "SIGINT_AT": module},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 130, res.stderr
    assert res.stderr.strip() == "interrupted" and res.stdout == "", res.stderr


# the moment: a real SIGINT at the K-th line singa_core/__init__.py executes, from its
# `try:` on (issue 46, point 2: 4 of 64 random SIGINTs hit `import signal` there). The
# line before it is the module's docstring, whose bytecode never checks for a signal: one
# arriving then is handled at the first check, inside the `try`. A `try:` line is a NOP,
# which checks for none either (and CPython 3.11 leaves it out of the enclosing `try`'s
# exception range, so a signal raised there by a trace function alone escapes): skipped.
AT_LINE = textwrap.dedent(
    """
    import os, signal, sys
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as a terminal starts it
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    import importlib.util
    # the file Python will run (the checkout's, or an installed copy's), found unimported
    INIT = importlib.util.find_spec("singa_core").origin
    LINES = open(INIT).read().splitlines()
    FIRST = 1 + next(i for i, ln in enumerate(LINES) if ln.startswith("try:"))
    seen = [0]

    def local(frame, event, arg):
        nop = LINES[frame.f_lineno - 1].strip() == "try:"
        if event == "line" and frame.f_lineno > FIRST and not nop:
            seen[0] += 1
            if seen[0] == int(os.environ["SIGINT_AT_LINE"]):
                with open(os.environ["SENT"], "w") as fh:
                    fh.write(str(frame.f_lineno))
                sys.settrace(None)
                os.kill(os.getpid(), signal.SIGINT)
                return None
        return local

    def trace(frame, event, arg):
        if frame.f_code.co_filename == INIT and frame.f_code.co_name == "<module>":
            return local
        return None

    sys.settrace(trace)
    """
)


@pytest.mark.parametrize("k", range(1, 11))  # the lines it runs after `try:` in `singa`
def test_sigint_at_any_line_of_the_package_init(tmp_path, k):
    script = tmp_path / "singa"
    script.write_text(AT_LINE + CONSOLE_SCRIPT)
    sent = tmp_path / "sent"
    res = subprocess.run(
        [sys.executable, str(script), "version"],
        cwd=REPO,
        env={**os.environ, "SIGINT_AT_LINE": str(k), "SENT": str(sent), "REPO": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert sent.exists(), f"singa_core/__init__.py now runs fewer than {k} lines: fix the range"
    line = sent.read_text()
    assert res.returncode == 130, (line, res.stderr)
    assert res.stderr.strip() == "interrupted" and res.stdout == "", (line, res.stderr)


def test_sigint_while_python_m_loads(tmp_path):
    # python -m: the prelude runs as a sitecustomize module on the path
    (tmp_path / "sitecustomize.py").write_text(PRELUDE)
    res = subprocess.run(
        [sys.executable, "-m", "singa_core.commands.cli", "list-plugins"],
        cwd=REPO,
        env={**os.environ, "SIGINT_AT": "pluggy", "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 130, res.stderr
    assert res.stderr.strip() == "interrupted", res.stderr


def _inherit(handler):
    """The SIGINT disposition the child starts with: a shell's background job (``cmd &``,
    nohup) starts with it ignored, a terminal's command with the default; Python then
    installs its ``default_int_handler`` only in the second case."""
    return lambda: signal.signal(signal.SIGINT, handler)


# what the child prints: the handler's name, or the enum's (SIG_IGN, SIG_DFL)
SHOW_SIGINT = (
    "h = signal.getsignal(signal.SIGINT); "
    "print(h.name if isinstance(h, signal.Handlers) else h.__name__)"
)


@pytest.mark.parametrize(
    ("inherited", "kept"),
    [(signal.SIG_DFL, "default_int_handler"), (signal.SIG_IGN, "SIG_IGN")],
)
def test_a_library_user_keeps_python_s_interrupt(inherited, kept):
    code = "import signal, singa_core; " + SHOW_SIGINT
    res = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
        preexec_fn=_inherit(inherited),
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == kept, res.stdout


@pytest.mark.parametrize(
    ("inherited", "loading", "after"),
    [
        (signal.SIG_DFL, "_interrupted_while_loading", "default_int_handler"),
        (signal.SIG_IGN, "SIG_IGN", "SIG_IGN"),  # nohup, `singa ... &`: it stays ignored
    ],
)
def test_the_command_itself_gets_python_s_interrupt_back(inherited, loading, after):
    code = "\n".join(
        [
            "import signal, sys",
            "sys.argv = ['singa', 'version']",
            "from singa_core.commands import cli",
            SHOW_SIGINT,
            "try:\n    cli.main()\nexcept SystemExit:\n    pass",
            SHOW_SIGINT,
        ]
    )
    res = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
        preexec_fn=_inherit(inherited),
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert (lines[0], lines[-1]) == (loading, after), res.stdout


def test_sigint_while_a_command_runs_is_one_line_too(tmp_path):
    # typer turns a KeyboardInterrupt in a command into a silent exit 130
    script = tmp_path / "singa"
    script.write_text(PRELUDE + CONSOLE_SCRIPT)
    res = subprocess.run(
        [sys.executable, str(script), "list-plugins"],
        cwd=REPO,
        env={**os.environ, "SIGINT_AT": "singa_builtins.layers"},  # the plugins load
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 130, res.stderr
    assert res.stderr.strip() == "interrupted" and res.stdout == "", res.stderr


# in a worker process of `singa data images`: Ctrl-C (to the process group, as a terminal
# sends it) when the worker starts decoding
WORKER_SIGINT = textwrap.dedent(
    """
    import os, signal, sys

    class SignalOnImport:
        def find_spec(self, name, path=None, target=None):
            if name == "PIL.PngImagePlugin" and "multiprocessing" in sys.modules:
                import multiprocessing
                if multiprocessing.parent_process() is not None:
                    sys.meta_path.remove(self)
                    os.killpg(os.getpgid(0), signal.SIGINT)
            return None

    sys.meta_path.insert(0, SignalOnImport())
    """
)


def test_sigint_while_images_decode_in_worker_processes(tmp_path):
    Image = pytest.importorskip("PIL.Image")
    import numpy as np

    src = tmp_path / "src"
    rng = np.random.default_rng(0)
    for c in ("a", "b"):
        (src / c).mkdir(parents=True)
        for i in range(70):  # two chunks of 64: two worker processes
            Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(
                src / c / f"{i}.png"
            )
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(WORKER_SIGINT)
    out = tmp_path / "out"
    res = subprocess.run(
        [sys.executable, "-m", "singa_core.commands.cli", "data", "images", str(src),
         "--out", str(out), "--backend", "lmdb"],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(tmp_path / "site")},
        capture_output=True, text=True, timeout=120, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    if "in 2 processes" not in res.stderr:
        pytest.skip(f"decoding did not use worker processes here: {res.stderr}")
    assert res.returncode == 130, res.stderr
    assert res.stderr.splitlines()[-1] == "interrupted" and "Traceback" not in res.stderr
    assert not [p for p in out.iterdir() if p.name.startswith(".")]
