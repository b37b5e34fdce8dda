"""The automatic BLAS thread count (issue 21 point 5) against the fixed choices.

    python benchmarks/auto_threads.py [--steps 150] [--rounds 2] [--busy 2]

Runs ``singa train examples/mnist/job.conf`` (in-process engine) for ``--steps`` steps with
OPENBLAS_NUM_THREADS=1, with every usable CPU, and with nothing set (singa's automatic
choice), alternating in rounds, and prints each run's ms/step (singa's own closing line)
and the count the automatic run chose. ``--busy K`` first starts K CPU-bound processes
beside it (``python -c "while True: pass"``) and kills them, by pid, at the end. The machine
facts and the load average are printed with every number.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile

from _common import REPO, load_average, machine_facts, mnist_stores

from singa_core.contracts.resources import usable_cpus


def one_run(stores, steps: int, threads: int | None) -> tuple[float, float, str]:
    env = {
        k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")
    }
    if threads is not None:
        env["OPENBLAS_NUM_THREADS"] = str(threads)
    with tempfile.TemporaryDirectory() as ws:
        res = subprocess.run(
            [sys.executable, "-m", "singa_core.commands.cli", "train",
             str(REPO / "examples" / "mnist" / "job.conf"), "-q", "--no-tensorboard",
             "--workspace", ws, "--seed", "1", "-o", f"train_steps={steps}",
             "-o", "test_freq=0", "-o", "checkpoint_freq=0",
             "-o", f"neuralnet.layer[0].store_conf.path={stores / 'train_data.bin'}",
             "-o", f"neuralnet.layer[1].store_conf.path={stores / 'test_data.bin'}"],
            env=env, capture_output=True, text=True, check=True,
        )  # fmt: skip
    ms = float(re.search(r"([\d.]+) ms/step", res.stderr).group(1))
    total = float(re.search(r"finished at step \d+ in ([\d.]+) s", res.stderr).group(1))
    chosen = re.search(r"BLAS threads: (\d+) \((.*)\)", res.stderr)
    return ms, total, (f"chose {chosen.group(1)}: {chosen.group(2)}" if chosen else "")


def _medians(title: str, runs: dict[str, list[float]]) -> str:
    """``title: label median, ...; automatic / best fixed = ratio``."""
    med = {k: statistics.median(v) for k, v in runs.items()}
    best = min(med[k] for k in med if k != "automatic")
    return (
        f"{title}: " + ", ".join(f"{k} {v:.1f}" for k, v in med.items())
        + f"; automatic / best fixed = {med['automatic'] / best:.3f}"
    )  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--busy", type=int, default=0, help="CPU-bound processes to start beside")
    a = ap.parse_args()
    cpus = usable_cpus()
    for line in machine_facts(cpus):
        print(line)
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(a.busy)]
    print(f"competing CPU-bound processes: {a.busy} (pids {[h.pid for h in hogs]})")
    try:
        stores = mnist_stores()
        times: dict[str, list[float]] = {"1 thread": [], f"{cpus} threads": [], "automatic": []}
        totals: dict[str, list[float]] = {k: [] for k in times}
        for r in range(a.rounds):
            for label, threads in (("1 thread", 1), (f"{cpus} threads", cpus), ("automatic", None)):
                ms, total, note = one_run(stores, a.steps, threads)
                times[label].append(ms)
                totals[label].append(total)
                print(f"round {r + 1} {label:>10}: {ms:7.1f} ms/step, run {total:5.1f} s (with "
                      f"set-up and trial)  {load_average()}  {note}", flush=True)  # fmt: skip
        print(_medians("median ms/step", times) + f"; {load_average()}")
        print(_medians("median run seconds", totals))
    finally:
        for h in hogs:
            os.kill(h.pid, signal.SIGKILL)
            h.wait()


if __name__ == "__main__":
    main()
