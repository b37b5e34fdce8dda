"""kill -9 at seeded random moments, then --resume (issue 11 point 7).

A small job runs under the in-process engine and under the shm engine with a synchronous
group of 2 workers. Each run is killed with SIGKILL five times, at moments drawn from a
seeded generator — a training step (the kill comes when metrics.jsonl shows it, plus up to
10 ms), so every kill lands in training whatever the machine's speed — and resumed after
each kill (a fresh start when no checkpoint was written yet). The final
checkpoint must be byte-identical to the one of an uninterrupted run; no temp files, no
/dev/shm segments and no processes may be left behind.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, mlp_conf, own_shm_segments, track, write_csv_blobs

KILLS = 5
SHM_GROUP = ["-o", "cluster.nworkers_per_group=2", "-o", "cluster.server_worker_separate=true"]


def _shm_entries() -> set[str]:
    return own_shm_segments()  # only this test's jobs: others may run in parallel


def _descendants(pid: int) -> set[int]:
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = list(Path(f"/proc/{p}/task").iterdir())
        except FileNotFoundError:
            continue
        for t in tasks:
            try:
                kids = [int(k) for k in (t / "children").read_text().split()]
            except FileNotFoundError:
                continue
            out.update(kids)
            todo += kids
    return out


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _start(conf: Path, ws: Path, extra: list[str], resume: bool) -> subprocess.Popen:
    args = [
        sys.executable,
        "-m",
        "singa_core.commands.cli",
        "train",
        str(conf),
        "--seed",
        "7",
        "-q",
    ]
    args += ["--workspace", str(ws), *extra] + (["--resume"] if resume else [])
    # one BLAS thread for every run: the automatic choice (a trial on the first steps) may
    # pick another count for the uninterrupted run under load, and the checkpoint records it
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    return track(
        subprocess.Popen(
            args, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
    )


def _trained_to(ws: Path, since: float) -> int:
    """The last training step metrics.jsonl shows in records written after time ``since``
    (a resumed run rewrites the file, so offsets do not do)."""
    path = ws / "metrics.jsonl"
    if not path.exists():
        return -1
    steps = [-1]
    for line in path.read_text().splitlines():
        if line.endswith("}"):
            rec = json.loads(line)
            if rec.get("phase") == "train" and rec.get("time", 0) >= since:
                steps.append(int(rec["step"]))
    return max(steps)


def _checkpointed(ws: Path) -> bool:
    return any((ws / "checkpoint").glob("step*-worker0")) if (ws / "checkpoint").is_dir() else False


def _run_with_kills(conf: Path, ws: Path, extra: list[str], steps: int, seed: int):
    """Kill the run when it has displayed a seeded random training step (plus up to 10 ms),
    KILLS times, resuming after each; then let it finish."""
    rng = random.Random(seed)
    moments = sorted(rng.sample(range(10, steps - 10), KILLS))
    orphans: set[int] = set()
    resumed = 0
    for target in moments:
        resumed += _checkpointed(ws)
        since = time.time()
        proc = _start(conf, ws, extra, resume=_checkpointed(ws))
        try:
            deadline = time.monotonic() + 120
            while _trained_to(ws, since) < target:
                assert proc.poll() is None, proc.communicate()[1]
                assert time.monotonic() < deadline, "the run made no progress"
                time.sleep(0.005)
            time.sleep(rng.uniform(0.0, 0.01))
            orphans |= _descendants(proc.pid)
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.wait(timeout=30)
            proc.stderr.close()
    resumed += _checkpointed(ws)
    last = _start(conf, ws, extra, resume=_checkpointed(ws))
    _, err = last.communicate(timeout=120)
    assert last.returncode == 0, err
    assert resumed >= 2, f"only {resumed} of the runs resumed (the kills came too early)"
    return orphans


def _uninterrupted(conf: Path, ws: Path, extra: list[str]) -> None:
    proc = _start(conf, ws, extra, resume=False)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err


def _leftovers(ws: Path) -> list[str]:
    return [str(p) for p in ws.rglob("*") if p.name.endswith(".tmp") or ".tmp" in p.name]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("engine", "extra", "steps"),
    [("inprocess", [], 600), ("shm", ["--engine", "shm", *SHM_GROUP], 300)],
)
def test_kill9_and_resume_gives_the_uninterrupted_checkpoint(tmp_path, engine, extra, steps):
    data = write_csv_blobs(tmp_path / "blobs.csv")
    conf = tmp_path / "job.conf"
    conf.write_text(mlp_conf(data, tmp_path / "unused", steps=steps, checkpoint_freq=25))
    shm_before = _shm_entries()

    ref = tmp_path / "ref"
    _uninterrupted(conf, ref, extra)
    ws = tmp_path / "killed"
    orphans = _run_with_kills(conf, ws, extra, steps, seed=11)

    final = f"checkpoint/step{steps}-worker0"
    assert (ws / final).read_bytes() == (ref / final).read_bytes()
    state = final + ".state.npz"
    assert (ws / state).read_bytes() == (ref / state).read_bytes()
    assert _leftovers(ws) == []
    deadline = time.monotonic() + 15  # orphaned engine processes notice their launcher died
    while any(_alive(p) for p in orphans) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in orphans if _alive(p) and p != os.getpid()]
    deadline = time.monotonic() + 10  # the resource tracker unlinks a killed launcher's segments
    while _shm_entries() - shm_before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _shm_entries() - shm_before == set()
