"""The shared-memory parameter-server engine against the in-process engine, in one run.

    python benchmarks/cluster.py [--rounds 3] [--part a|b|c|all]

(a) overhead: SINGA's MNIST MLP (examples/mnist/job.conf, batch 64) with 1 worker process
    + 1 server process (``--engine shm``) against the in-process engine, same BLAS threads;
(b) scaling: images/s of the CIFAR-10 net (examples/cifar10/job.conf, batch 100) with 1
    versus 2 synchronous workers of one group (each worker process 1 BLAS thread, the batch
    split between them), both on the shm engine;
(c) bandwidth: parameter bytes synchronised per second — a net that is one 4096×4096
    inner-product layer on a batch of 1, so a step is almost only moving its 64 MiB
    gradient to the server and the update back — next to the memcpy bandwidth of the same
    number of bytes measured in the same run.

Every figure is ``singa train``'s own ms/step (the mean over the training steps, start-up
excluded), from runs alternating A B A B; medians are printed.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import REPO, cifar10_stores, mnist_stores

STEP = re.compile(r"finished at step \d+ \(([\d.]+) ms/step\)")


def run_ms(conf: Path, overrides: dict, engine: str) -> float:
    ws = tempfile.mkdtemp(prefix="singa-bench-cluster-")
    args = [sys.executable, "-m", "singa_core.cli", "train", str(conf), "--engine", engine]
    for key, value in {**overrides, "cluster.workspace": ws, "checkpoint_freq": 0}.items():
        args += ["-o", f"{key}={value}"]
    proc = subprocess.run(args, capture_output=True, text=True, cwd=REPO, timeout=1800)
    found = STEP.search(proc.stdout + proc.stderr)
    if proc.returncode != 0 or found is None:
        raise SystemExit(f"{' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return float(found.group(1))


def alternate(rounds: int, runs: dict) -> dict[str, float]:
    """name -> median ms/step over ``rounds`` alternating runs of each configuration."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, fn in runs.items():
            times[name].append(fn())
    for name, t in times.items():
        print(f"  {name:34s} median {statistics.median(t):8.2f} ms/step  {sorted(t)}")
    return {name: statistics.median(t) for name, t in times.items()}


def part_a(rounds: int, threads: int) -> None:
    stores = mnist_stores()
    conf = REPO / "examples" / "mnist" / "job.conf"
    common = {
        "neuralnet.layer[0].store_conf.path": stores / "train_data.bin",
        "neuralnet.layer[1].store_conf.path": stores / "test_data.bin",
        "train_steps": 150,
        "test_steps": 0,
        "num_openblas_threads": threads,
    }
    print(f"(a) MNIST MLP batch 64, {threads} BLAS thread(s) per process")
    med = alternate(
        rounds,
        {
            "in-process engine": lambda: run_ms(conf, common, "inprocess"),
            "1 worker + 1 server process (shm)": lambda: run_ms(
                conf, {**common, "cluster.server_worker_separate": "true"}, "shm"
            ),
        },
    )
    ratio = med["1 worker + 1 server process (shm)"] / med["in-process engine"]
    print(f"  overhead of the separate processes: {100 * (ratio - 1):+.1f}% per step")


def part_b(rounds: int) -> None:
    stores = cifar10_stores()
    conf = REPO / "examples" / "cifar10" / "job.conf"
    common = {
        "neuralnet.layer[0].store_conf.path": stores / "train_data.bin",
        "neuralnet.layer[0].store_conf.mean_file": stores / "image_mean.bin",
        "neuralnet.layer[1].store_conf.path": stores / "test_data.bin",
        "neuralnet.layer[1].store_conf.mean_file": stores / "image_mean.bin",
        "train_steps": 40,
        "test_steps": 0,
        "num_openblas_threads": 1,
    }
    print("(b) CIFAR-10 net, batch 100 per step, 1 BLAS thread per worker process (shm)")
    med = alternate(
        rounds,
        {
            "1 worker": lambda: run_ms(conf, {**common, "cluster.nworkers_per_group": 1}, "shm"),
            "2 synchronous workers": lambda: run_ms(
                conf, {**common, "cluster.nworkers_per_group": 2}, "shm"
            ),
        },
    )
    one, two = 100_000 / med["1 worker"], 100_000 / med["2 synchronous workers"]
    print(f"  {one:.0f} images/s with 1 worker, {two:.0f} with 2: scaling {two / one:.2f}x")


BIG = """
name: "sync-bandwidth"
train_steps: 60
disp_freq: 0
train_one_batch {{ alg: kBP }}
updater {{ type: kSGD learning_rate {{ type: kFixed base_lr: 0.0001 }} }}
neuralnet {{
  layer {{ name: "data" type: kDummy dummy_conf {{ input: true shape: 1 shape: {n} }} }}
  layer {{
    name: "ip" type: kInnerProduct srclayers: "data" innerproduct_conf {{ num_output: {n} }}
    param {{ name: "w" init {{ type: kGaussian std: 0.001 }} }}
    param {{ name: "b" init {{ type: kConstant value: 0 }} }}
  }}
  layer {{ name: "loss" type: kEuclideanLoss srclayers: "ip" srclayers: "data" }}
}}
cluster {{ workspace: "unused" }}
"""


def part_c(rounds: int, n: int = 4096) -> None:
    conf = Path(tempfile.mkdtemp(prefix="singa-bench-bw-")) / "job.conf"
    conf.write_text(BIG.format(n=n))
    nbytes = 4 * (n * n + n)
    print(f"(c) {nbytes / 2**20:.0f} MiB of parameters, batch 1: a step is mostly synchronisation")
    med = alternate(
        rounds,
        {
            "in-process engine": lambda: run_ms(conf, {"num_openblas_threads": 1}, "inprocess"),
            "1 worker + 1 server process (shm)": lambda: run_ms(
                conf, {"num_openblas_threads": 1, "cluster.server_worker_separate": "true"}, "shm"
            ),
        },
    )
    src = np.ones(nbytes // 4, dtype=np.float32)
    dst = np.empty_like(src)
    copies = []
    for _ in range(20):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        copies.append(time.perf_counter() - t0)
    memcpy = nbytes / statistics.median(copies)
    shm_ms = med["1 worker + 1 server process (shm)"]
    synced = nbytes / (shm_ms / 1000)  # the gradient out and the update's values, per step
    print(f"  memcpy of {nbytes / 2**20:.0f} MiB: {memcpy / 1e9:.2f} GB/s")
    print(
        f"  parameter bytes synchronised per second (shm, whole step): {synced / 1e9:.2f} GB/s "
        f"= {synced / memcpy:.2f}x memcpy"
    )
    extra = shm_ms - med["in-process engine"]
    if extra > 0:
        print(
            f"  time the shm engine adds per step: {extra:.1f} ms "
            f"({nbytes / (extra / 1000) / 1e9:.2f} GB/s of parameters)"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--part", choices=["a", "b", "c", "all"], default="all")
    ap.add_argument("--threads", type=int, default=1, help="BLAS threads per process in (a)")
    args = ap.parse_args()
    if args.part in ("a", "all"):
        part_a(args.rounds, args.threads)
    if args.part in ("b", "all"):
        part_b(args.rounds)
    if args.part in ("c", "all"):
        part_c(args.rounds)


if __name__ == "__main__":
    main()
