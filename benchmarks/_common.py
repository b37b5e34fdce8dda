"""Shared helpers for the benchmarks: data location, timing, thread pinning."""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def mnist_stores() -> Path:
    """A folder with SINGA's MNIST kvfiles: examples/mnist if converted, else a temp copy."""
    ex = REPO / "examples" / "mnist"
    if (ex / "train_data.bin").exists() and (ex / "test_data.bin").exists():
        return ex
    from singa_core.datasets import prepare_dataset
    from singa_core.plugin_host import get_host

    out = Path(tempfile.mkdtemp(prefix="singa-bench-mnist-"))
    src = os.environ.get("SINGA_DATA", str(REPO.parent / "shared" / "data"))
    prepare_dataset(get_host().get("dataset", "mnist")(), out, Path(src) / "mnist")
    return out


def interleaved(fns: dict, rounds: int, steps_per_round: int, warmup: int) -> dict:
    """Time several step functions in alternating rounds (A B A B ...), so that the
    machine's speed drifting (shared hosts) affects them alike. Returns name -> times."""
    counters = dict.fromkeys(fns, 0)
    for name, fn in fns.items():
        for _ in range(warmup):
            fn(counters[name])
            counters[name] += 1
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            for _ in range(steps_per_round):
                t0 = time.perf_counter()
                fn(counters[name])
                times[name].append(time.perf_counter() - t0)
                counters[name] += 1
    return times


def standard_args(description: str, *, rounds: int, steps: int, warmup: int, extra=None):
    """The options every benchmark takes (rounds, steps per round, warm-up, threads)."""
    import argparse

    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--rounds", type=int, default=rounds)
    ap.add_argument("--steps", type=int, default=steps, help="steps per round")
    ap.add_argument("--warmup", type=int, default=warmup)
    ap.add_argument("--threads", type=int, default=2)
    if extra is not None:
        extra(ap)
    return ap.parse_args()


def compare_with_pytorch(title: str, singa_fn, torch_fn, args) -> dict:
    """Time singa's and (when installed) PyTorch's step functions in alternating rounds;
    print each median and their ratio. Returns name -> step times."""
    import sys

    fns = {"singa": singa_fn}
    if torch_fn is not None:
        fns["pytorch"] = torch_fn
    times = interleaved(fns, args.rounds, args.steps, args.warmup)
    for name, t in times.items():
        print(f"{name:8s} {title}, {args.threads} thread(s): {summary(t)}")
    if torch_fn is None:
        print("pytorch  not installed: pip install torch==2.13.0 for the comparison")
    else:
        ratio = median_ms(times["singa"]) / median_ms(times["pytorch"])
        print(f"ratio singa/pytorch (median): {ratio:.2f}x")
    sys.stdout.flush()
    return times


def summary(times: list[float]) -> str:
    ms = [t * 1000 for t in times]
    return f"median {statistics.median(ms):7.2f} ms/step (min {min(ms):.2f}, max {max(ms):.2f})"


def median_ms(times: list[float]) -> float:
    return statistics.median(times) * 1000


def char_rnn_texts() -> Path:
    """A folder with train.txt, val.txt and vocab.txt of tiny-shakespeare: examples/char-rnn
    if converted, else a temp conversion of $SINGA_DATA/tinyshakespeare."""
    ex = REPO / "examples" / "char-rnn"
    if all((ex / n).exists() for n in ("train.txt", "val.txt", "vocab.txt")):
        return ex
    from singa_core.datasets import prepare_dataset
    from singa_core.plugin_host import get_host

    out = Path(tempfile.mkdtemp(prefix="singa-bench-text-"))
    src = os.environ.get("SINGA_DATA", str(REPO.parent / "shared" / "data"))
    prepare_dataset(
        get_host().get("dataset", "tinyshakespeare")(), out, Path(src) / "tinyshakespeare"
    )
    return out


def cifar10_stores() -> Path:
    """A folder with SINGA's CIFAR-10 kvfiles: examples/cifar10 if converted, else a temp
    conversion of $SINGA_DATA/cifar10."""
    ex = REPO / "examples" / "cifar10"
    names = ("train_data.bin", "test_data.bin", "image_mean.bin")
    if all((ex / n).exists() for n in names):
        return ex
    from singa_core.datasets import prepare_dataset
    from singa_core.plugin_host import get_host

    out = Path(tempfile.mkdtemp(prefix="singa-bench-cifar10-"))
    src = os.environ.get("SINGA_DATA", str(REPO.parent / "shared" / "data"))
    prepare_dataset(get_host().get("dataset", "cifar10")(), out, Path(src) / "cifar10")
    return out


def singa_train_step(conf: Path, overrides: list[str], threads: int):
    """One training step (data, forward, backward, update through the stub) of ``conf``
    on the in-process engine, as a function of the step number."""
    from singa_core.blas import set_blas_threads
    from singa_core.config import load_job
    from singa_core.job import prepare_job
    from singa_core.plugin_host import get_host
    from singa_core.reporting import Reporter

    ws = tempfile.mkdtemp(prefix="singa-bench-")
    cfg = load_job(
        conf,
        [*overrides, f"cluster.workspace={ws}", "test_steps=0", f"num_openblas_threads={threads}"],
    )
    host = get_host()
    prepared = prepare_job(cfg, host, seed=0)
    engine = host.get("engine", "inprocess")(prepared, Reporter(quiet=True))
    set_blas_threads(threads)
    engine._init_params()
    loop = engine._loop()
    net, worker, stub = engine.train_net, engine.worker, loop.stub
    return lambda s: worker.train_one_batch(s, net, stub)
