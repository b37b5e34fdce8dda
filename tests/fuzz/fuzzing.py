"""What the fuzz tests share: the case budget, a per-case time limit, mutation strategies
for job.conf text, and the check that an outcome is a run or a located SingaError.

Budget: CI runs ``BASE`` examples per property (the whole suite stays under 90 s);
``SINGA_FUZZ_LONG=1`` (or ``pytest --fuzz-long``) runs 100 times as many, with fresh random
seeds each time instead of the derandomized CI sequence (``SINGA_FUZZ_SCALE=k`` runs k
times as many). With ``SINGA_FUZZ_COUNTS=FILE``
every property adds its number of cases to that JSON file (for docs/testing.md).
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
LONG = os.environ.get("SINGA_FUZZ_LONG", "") not in ("", "0")
# the multiplier of the CI budget: 100 with SINGA_FUZZ_LONG, or SINGA_FUZZ_SCALE=k
SCALE = int(os.environ.get("SINGA_FUZZ_SCALE") or (100 if LONG else 1))
CASE_SECONDS = 5.0  # the most CPU time any single input may take (the process's, all threads)
# a case that waits without computing (a FIFO opened, a lock, a child that never answers)
# uses no CPU: a wall-clock limit this many times longer catches it, far beyond what any
# load makes of a 5 s case (at load 12 on 2 cores a case runs about 6x slower)
WALL_BACKSTOP = 24
COUNTS: Counter = Counter()


def fuzz_settings(base: int):
    """``base`` examples in CI, 100x with SINGA_FUZZ_LONG; no deadline flakiness (the time
    limit is enforced by :func:`time_limit`), no example database left behind."""
    return settings(
        max_examples=base * SCALE,
        deadline=None,
        database=None,
        derandomize=SCALE == 1,
        phases=(Phase.explicit, Phase.generate, Phase.shrink),
        suppress_health_check=list(HealthCheck),
        print_blob=True,
    )


class Hang(Exception):
    """A case used more than CASE_SECONDS of CPU time, or waited WALL_BACKSTOP times as long."""


def cpu_seconds() -> float:
    """CPU time of this process so far (user + system, every thread)."""
    t = os.times()
    return t.user + t.system


@contextmanager
def time_limit(seconds: float = CASE_SECONDS, wall_factor: float = WALL_BACKSTOP):
    """Raise :class:`Hang` in the main thread if the block uses more than ``seconds`` of
    CPU time (``ITIMER_PROF``: the process's user + system time, which another process's
    load does not inflate), or runs ``wall_factor`` times ``seconds`` of wall-clock time
    (``ITIMER_REAL``: a wait that computes nothing)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    start = time.monotonic()
    cpu_start = cpu_seconds()

    def on_cpu(signum, frame):
        raise Hang(f"the case used more than {seconds} s of CPU time")

    def on_wall(signum, frame):
        used = cpu_seconds() - cpu_start
        raise Hang(
            f"the case ran {time.monotonic() - start:.0f} s (wall clock) using {used:.1f} s "
            "of CPU time: it waits for something that does not come"
        )

    prev_prof = signal.signal(signal.SIGPROF, on_cpu)
    prev_alarm = signal.signal(signal.SIGALRM, on_wall)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    signal.setitimer(signal.ITIMER_REAL, seconds * wall_factor)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGPROF, prev_prof)
        signal.signal(signal.SIGALRM, prev_alarm)


MAX_RSS_MB = 4096  # a leak across cases (or one case touching gigabytes) fails the property


def rss_mb() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") >> 20


def count(target: str) -> None:
    """Count a finished case, and check the process has not grown past MAX_RSS_MB."""
    COUNTS[target] += 1
    rss = rss_mb()
    assert rss < MAX_RSS_MB, f"the test process holds {rss} MB after {COUNTS[target]} cases"


def write_counts() -> None:
    out = os.environ.get("SINGA_FUZZ_COUNTS")
    if not out or not COUNTS:
        return
    path = Path(out)
    old = json.loads(path.read_text()) if path.exists() else {}
    for k, v in COUNTS.items():
        old[k] = old.get(k, 0) + v
    path.write_text(json.dumps(old, indent=2, sort_keys=True) + "\n")
    COUNTS.clear()


# -- outcomes -----------------------------------------------------------------------------
_LOCATED = re.compile(r"^(?P<where>\S.*?): error: ", re.M)


def assert_run_or_located_error(res) -> str:
    """A CliRunner result is exit 0, or exit 2 with a ``WHERE: error: WHAT`` message and a
    ``help:`` line (no traceback, no click ``Usage:``/``Error:`` block: one form for every
    user error, issue 46). Returns "ok" or "error"."""
    if res.exit_code == 0 and res.exception is None:
        return "ok"
    exc = res.exception
    if not isinstance(exc, SystemExit) or res.exit_code != 2:
        import traceback

        tb = "".join(traceback.format_exception(exc)) if exc else ""
        raise AssertionError(f"exit {res.exit_code}, not a user error:\n{res.output}\n{tb}")
    assert "Traceback" not in res.output, res.output
    m = _LOCATED.search(res.output)
    assert m, f"error without a location:\n{res.output}"
    assert re.search(r"^help: \S", res.output[m.start() :], re.M), (
        f"error without a help line:\n{res.output}"
    )
    assert not re.search(r"^(Usage: |Error: )", res.output, re.M), (
        f"click's own form, not singa's:\n{res.output}"
    )
    assert len(res.output) < 20_000, f"error message of {len(res.output)} characters"
    return "error"


# -- job.conf mutations -------------------------------------------------------------------
def example_confs() -> list[Path]:
    return sorted(REPO.glob("examples/*/*.conf"))


EXTREME_NUMBERS = [
    "0",
    "-0",
    "-1",
    "1",
    "-2147483649",
    "2147483647",
    "2147483648",
    "4294967296",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775809",
    "18446744073709551616",
    "1e308",
    "1e309",
    "-1e309",
    "1e-320",
    "nan",
    "-nan",
    "inf",
    "-inf",
    "infinity",
    "0.5",
    "-0.5",
    "1e10",
    "100000000000000000000000000000",
    "0x7fffffff",
    "0777",
    "1.",
    ".5",
]
_NUMBER = re.compile(r"(?<![\w.\-])-?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+)(?![\w.])")
_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')
_ENUM_WORD = re.compile(r"\bk[A-Z][A-Za-z0-9]*\b")


def _enum_names() -> list[str]:
    from singa_core.schema import job_pb2

    names = set()
    for enum in job_pb2.DESCRIPTOR.enum_types_by_name.values():
        names.update(v.name for v in enum.values)
    for msg in job_pb2.DESCRIPTOR.message_types_by_name.values():
        for enum in msg.enum_types:
            names.update(v.name for v in enum.values)
    return sorted(names)


ENUM_NAMES = _enum_names()


@st.composite
def byte_mutation(draw, data: bytes) -> bytes:
    """1-8 random byte edits: flip, set, insert, delete, duplicate a chunk, truncate."""
    buf = bytearray(data)
    for _ in range(draw(st.integers(1, 8))):
        if not buf:
            buf += draw(st.binary(min_size=1, max_size=8))
            continue
        i = draw(st.integers(0, len(buf) - 1))
        op = draw(st.sampled_from(["flip", "set", "insert", "delete", "dup", "truncate"]))
        if op == "flip":
            buf[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "set":
            buf[i] = draw(st.integers(0, 255))
        elif op == "insert":
            buf[i:i] = draw(st.binary(min_size=1, max_size=16))
        elif op == "delete":
            del buf[i : i + draw(st.integers(1, 32))]
        elif op == "dup":
            n = draw(st.integers(1, 64))
            buf[i:i] = buf[i : i + n]
        else:
            del buf[i:]
    return bytes(buf)


def _code_lines(text: str) -> list[int]:
    return [
        i
        for i, line in enumerate(text.split("\n"))
        if line.strip() and not line.lstrip().startswith("#")
    ]


@st.composite
def structure_mutation(draw, text: str) -> str:
    """1-3 edits that keep the text mostly well-formed: numbers replaced by extremes, NaN
    and negatives; enum values swapped; fields (lines) duplicated, removed or moved into
    another message; deep nesting; huge strings."""
    for _ in range(draw(st.integers(1, 3))):
        op = draw(
            st.sampled_from(["number", "number", "enum", "dup", "remove", "move", "nest", "string"])
        )
        lines = text.split("\n")
        code = _code_lines(text) or [0]
        if op == "number":
            nums = list(_NUMBER.finditer(text))
            if nums:
                m = draw(st.sampled_from(nums))
                new = draw(st.sampled_from(EXTREME_NUMBERS) | st.integers().map(str))
                text = text[: m.start()] + new + text[m.end() :]
        elif op == "enum":
            words = list(_ENUM_WORD.finditer(text))
            if words:
                m = draw(st.sampled_from(words))
                text = text[: m.start()] + draw(st.sampled_from(ENUM_NAMES)) + text[m.end() :]
        elif op == "dup":
            i = draw(st.sampled_from(code))
            lines.insert(i, lines[i])
            text = "\n".join(lines)
        elif op == "remove":
            i = draw(st.sampled_from(code))
            del lines[i]
            text = "\n".join(lines)
        elif op == "move":
            i = draw(st.sampled_from(code))
            line = lines.pop(i)
            opens = [j for j, s in enumerate(lines) if s.rstrip().endswith("{")] or [0]
            j = draw(st.sampled_from(opens))
            lines.insert(j + 1, line)
            text = "\n".join(lines)
        elif op == "nest":
            depth = draw(st.sampled_from([2, 50, 200, 1000, 10_000, 50_000]))
            name = draw(st.sampled_from(["neuralnet", "layer", "cluster", "updater", "x"]))
            i = draw(st.sampled_from(code))
            lines.insert(i, f"{name} {{ " * depth + "}" * depth)
            text = "\n".join(lines)
        else:
            strings = list(_STRING.finditer(text))
            n = draw(st.sampled_from([0, 1, 255, 4096, 100_000, 1_000_000]))
            filler = draw(st.sampled_from(["x", "/", "\\\\", "\\x00", "é", ".."]))
            huge = '"' + filler * n + '"'
            if strings and draw(st.booleans()):
                m = draw(st.sampled_from(strings))
                text = text[: m.start()] + huge + text[m.end() :]
            else:
                i = draw(st.sampled_from(code))
                lines.insert(i, f"name: {huge}")
                text = "\n".join(lines)
    return text
