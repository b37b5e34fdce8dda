"""Ray's own reports go to a log file in the workspace, not the terminal (unless asked).

When a node's raylet dies unexpectedly (``kill -9``, the OOM killer, the machine halting),
the agents beside it publish "Raylet is terminated. Termination is unexpected ... Last 20
lines of the Raylet logs:" with the raylet's last 20 log lines (Ray's
``ray/_private/process_watcher.py``, ``report_raylet_error_logs``), and the GCS publishes
errors such as a node marked dead. Every driver prints what is published: Ray's thread
``ray_listen_error_messages`` (``ray/_private/worker.py``, ``listen_error_messages``) hands
each message to ``print_to_stdstream``, which writes it, prefixed ``(raylet)``, to the
driver's stdout; ``log_to_driver=False`` does not stop it (it only stops the workers'
output). That is the 20+ lines of raylet state a user saw before singa's own message.

:class:`RayReports` (installed by :class:`~singa_builtins.engines.ray.runtime.Runtime`
after ``ray.init``) takes that path over: each message is appended, with its time, to
``WORKSPACE/ray-driver.log`` and the terminal gets one line, ``ray: Ray reported: <its
first line> (full report in WORKSPACE/ray-driver.log)``, once per distinct first line.
Ray's Python loggers (``ray.*``, at ERROR since ``ray.init(logging_level=ERROR)``) go to
the same file. ``--engine-option ray_log=terminal`` leaves Ray's printing as it is.

The seam is Ray's module-level name ``print_to_stdstream``, which the listener looks up at
every message: where a Ray version lacks it, nothing is taken over and Ray prints as before.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from pathlib import Path

LOG_NAME = "ray-driver.log"
MODES = ("file", "terminal")
FIRST_LINE = 160  # characters of a report's first line shown on the terminal


class RayReports:
    def __init__(self, path: str | Path | None, mode: str = "file", stream=None) -> None:
        self.path = Path(path) if path else None
        self.mode = mode
        self.stream = stream  # where the pointer lines go (sys.stderr at the time when None)
        self.shown: set[str] = set()
        self.count = 0
        self._lock = threading.Lock()
        self._module = None
        self._original = None
        self._handlers: list[tuple[logging.Handler, logging.Handler]] = []

    @property
    def active(self) -> bool:
        return self._original is not None

    def install(self) -> None:
        """Take Ray's printing of published errors and its loggers' terminal output over
        (after ``ray.init``, which sets both up); a no-op with ``ray_log=terminal``."""
        if self.mode == "terminal" or self.path is None or self.active:
            return
        try:
            from ray._private import worker as module
        except ImportError:
            return
        original = getattr(module, "print_to_stdstream", None)
        if original is None:
            return
        self._module, self._original = module, original

        def print_to_stdstream(data, *args, **kwargs):
            if data.get("pid") == "raylet":  # published errors, from the listener thread
                self.report("".join(data.get("lines") or ()))
                return None
            return original(data, *args, **kwargs)

        module.print_to_stdstream = print_to_stdstream
        ray_logger = logging.getLogger("ray")
        for handler in list(ray_logger.handlers):
            if isinstance(handler, logging.StreamHandler) and not isinstance(
                handler, logging.FileHandler
            ):
                to_file = _LazyFileHandler(self)
                to_file.setLevel(handler.level)
                to_file.setFormatter(handler.formatter)
                ray_logger.removeHandler(handler)
                ray_logger.addHandler(to_file)
                self._handlers.append((handler, to_file))

    def restore(self) -> None:
        if self._module is not None and self._original is not None:
            self._module.print_to_stdstream = self._original
        self._module = self._original = None
        ray_logger = logging.getLogger("ray")
        for original, to_file in self._handlers:
            ray_logger.removeHandler(to_file)
            ray_logger.addHandler(original)
        self._handlers = []

    def write(self, text: str) -> None:
        """Append ``text`` to the log file (made with its folder when first needed)."""
        assert self.path is not None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(text if text.endswith("\n") else text + "\n")

    def report(self, message: str) -> None:
        """One message Ray published: into the file; its first line, once, on the terminal."""
        lines = [x.strip() for x in message.splitlines() if x.strip()]
        first = lines[0] if lines else "(an empty message)"
        if len(first) > FIRST_LINE:
            first = first[: FIRST_LINE - 3].rstrip() + "..."
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        with self._lock:
            self.count += 1
            try:
                self.write(f"--- {stamp} Ray reported:\n{message.rstrip()}\n")
                where = f"full report in {self.path}"
            except OSError as exc:  # the workspace cannot take it: show it here after all
                where = f"could not write {self.path}: {exc.strerror}"
                first = message.rstrip()
            if first in self.shown:
                return
            self.shown.add(first)
            stream = self.stream or sys.stderr
            try:
                print(f"ray: Ray reported: {first} ({where})", file=stream, flush=True)
            except (OSError, ValueError):
                pass


class _LazyFileHandler(logging.Handler):
    """A ``ray.*`` logger's records appended to the reports' file."""

    def __init__(self, reports: RayReports) -> None:
        super().__init__()
        self.reports = reports

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.reports.write(self.format(record))
        except Exception:  # noqa: BLE001, S110 - logging must never raise or print
            pass
