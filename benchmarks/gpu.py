"""singa and PyTorch eager on one GPU: ms per training step of the benchmark nets.

One prepared script for a one-GPU machine (CuPy and PyTorch with CUDA installed, the
datasets in $SINGA_DATA): it prints the machine facts (CPU, GPU, library versions), then
for the MNIST MLP (batch 64), LeNet (batch 64), the CIFAR-10 net with LRN (batch 100) and
char-rnn's GRU the median ms/step of singa on cuda:0 and of PyTorch eager on the same GPU,
timed in alternating rounds, with their ratio; then `singa time`'s per-layer table of each
net on the GPU. Under 5 minutes with the defaults. Usage:

    python benchmarks/gpu.py [--rounds 6] [--steps 20] [--warmup 5] [--nets mlp,lenet,...]
    python benchmarks/gpu.py --profile char-rnn   # where singa's step spends its time there
"""

from __future__ import annotations

import argparse
import subprocess
import sys

import _common
from _common import REPO, interleaved, load_average, median_ms, print_machine_facts, summary


def _gpu_facts() -> list[str]:
    lines = []
    try:
        import cupy

        dev = cupy.cuda.runtime.getDeviceProperties(0)
        name = dev["name"].decode() if isinstance(dev["name"], bytes) else dev["name"]
        free, total = cupy.cuda.runtime.memGetInfo()
        lines.append(
            f"GPU: {name}, {total / 2**30:.1f} GiB ({free / 2**30:.1f} free); CuPy "
            f"{cupy.__version__}, CUDA runtime {cupy.cuda.runtime.runtimeGetVersion()}, "
            f"driver {cupy.cuda.runtime.driverGetVersion()}"
        )
    except Exception as exc:  # noqa: BLE001 - a fact to print, not to handle
        lines.append(f"GPU: none usable through CuPy ({type(exc).__name__}: {exc})")
    try:
        import torch

        lines.append(f"PyTorch {torch.__version__}, CUDA available: {torch.cuda.is_available()}")
    except ImportError:
        lines.append("PyTorch: not installed")
    return lines


def _torch_on_gpu(builder):
    """Build one of the benchmarks' PyTorch step functions with every tensor and module on
    the GPU; each step waits for the GPU."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    torch.set_default_device("cuda")
    try:
        step = builder()
    finally:
        torch.set_default_device("cpu")

    def synced(i):
        step(i)
        torch.cuda.synchronize()

    return synced


def nets():
    import char_rnn
    import conv_nets
    import mnist_mlp

    texts = _common.char_rnn_texts()
    return {
        "mlp": (
            "MNIST MLP, batch 64",
            lambda: mnist_mlp.singa_step(_common.mnist_stores(), 1),
            lambda: mnist_mlp.torch_step(1),
            REPO / "examples" / "mnist" / "job.conf",
        ),
        "lenet": (
            "LeNet, batch 64",
            lambda: conv_nets.singa_lenet(1),
            lambda: conv_nets.torch_lenet(1),
            REPO / "examples" / "mnist" / "conv.conf",
        ),
        "cifar10": (
            "CIFAR-10 net with LRN, batch 100",
            lambda: conv_nets.singa_cifar10(1),
            lambda: conv_nets.torch_cifar10(1),
            REPO / "examples" / "cifar10" / "job.conf",
        ),
        "char-rnn": (
            "char-rnn GRU 512, 50 x 50",
            lambda: char_rnn.singa_step(texts, 1, 512),
            lambda: char_rnn.torch_step(texts, 1, 512),
            REPO / "examples" / "char-rnn" / "job.conf",
        ),
    }


def _profile(net, steps, warmup) -> None:
    """The functions singa's step spends its time in on the device (host time: Python,
    kernel launches, waits for the device), by own time and by cumulative time."""
    import cProfile
    import pstats

    title, singa_fn, _, _ = net
    step = singa_fn()
    for i in range(warmup):
        step(i)
    prof = cProfile.Profile()
    prof.enable()
    for i in range(steps):
        step(warmup + i)
    prof.disable()
    print(f"\n== profile: singa {title}, {steps} steps")
    stats = pstats.Stats(prof, stream=sys.stdout)
    stats.sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumulative").print_stats(25)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--steps", type=int, default=20, help="steps per round")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--nets", default="mlp,lenet,cifar10,char-rnn")
    ap.add_argument(
        "--profile", metavar="NETS", help="instead: cProfile singa's steps of these nets"
    )
    args = ap.parse_args()
    if args.profile:
        _common.DEVICE = args.device
        table = nets()
        for key in args.profile.split(","):
            _profile(table[key], args.steps, args.warmup)
        return
    print_machine_facts(1)
    for line in _gpu_facts():
        print(line)
    _common.DEVICE = args.device
    table = nets()
    for key in args.nets.split(","):
        title, singa_fn, torch_fn, _ = table[key]
        fns = {"singa": singa_fn()}
        t = _torch_on_gpu(torch_fn)
        if t is not None:
            fns["pytorch"] = t
        times = interleaved(fns, args.rounds, args.steps, args.warmup)
        for name, ts in times.items():
            print(f"{name:8s} {title} on {args.device}: {summary(ts)}")
        if "pytorch" in times:
            ratio = median_ms(times["singa"]) / median_ms(times["pytorch"])
            print(f"ratio singa/pytorch eager (median): {ratio:.2f}x")
        sys.stdout.flush()
    print(f"({load_average()} at the end)")
    for key in args.nets.split(","):
        conf = table[key][3]
        print(f"\nsinga time {conf.relative_to(REPO)} --device {args.device}:")
        sys.stdout.flush()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "singa_core.commands.cli",
                "time",
                str(conf),
                "--device",
                args.device,
                "-n",
                "10",
            ],  # fmt: skip
            cwd=REPO,
            check=False,
        )


if __name__ == "__main__":
    main()
