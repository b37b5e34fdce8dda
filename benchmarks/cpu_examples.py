"""Every CPU example against PyTorch, one table: the MNIST MLP, LeNet, the CIFAR-10 net
(with its LRN layers), char-rnn and RBM1, each framework in a process of its own.

    python benchmarks/cpu_examples.py [--threads 2 1] [--quick] [--avx2]

Runs each example's own benchmark (benchmarks/mnist_mlp.py, conv_nets.py, char_rnn.py,
rbm.py) once per thread count and prints its medians, the ratio singa/PyTorch, the
fraction of the measured SGEMM peak each reaches, and the fraction of singa's step
roofline singa reaches (each pass of each layer at its FLOP over that peak or its least
bytes over the memcpy bandwidth, whichever is longer: ``_common.step_roofline``), with the
machine facts and the load at the start and end of each. ``--avx2`` makes both libraries
take their AVX2 code paths on a machine that has AVX-512 (OpenBLAS
``OPENBLAS_CORETYPE=Haswell``, PyTorch ``ATEN_CPU_CAPABILITY=avx2``, oneDNN
``ONEDNN_MAX_CPU_ISA=AVX2``, MKL ``MKL_ENABLE_INSTRUCTIONS=AVX2``): the kernels an AVX2
machine runs, on this machine's caches and clock. ``--quick``: fewer rounds (a look, not a
measurement).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

from _common import load_average, print_machine_facts

HERE = Path(__file__).resolve().parent

#: name -> (script, extra arguments, rounds, steps per round, warm-up)
EXAMPLES = {
    "MNIST MLP": ("mnist_mlp.py", [], 8, 15, 10),
    "LeNet": ("conv_nets.py", ["--net", "lenet"], 8, 15, 10),
    "CIFAR-10": ("conv_nets.py", ["--net", "cifar10"], 6, 6, 4),
    "char-rnn": ("char_rnn.py", [], 4, 4, 3),
    "RBM1": ("rbm.py", [], 8, 20, 10),
}

AVX2 = {
    "OPENBLAS_CORETYPE": "Haswell",
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
}


def run(name: str, threads: int, quick: bool, env: dict) -> dict:
    script, extra, rounds, steps, warmup = EXAMPLES[name]
    if quick:
        rounds, steps, warmup = 2, max(2, steps // 3), 2
    cmd = [sys.executable, str(HERE / script), "--threads", str(threads), "--rounds",
           str(rounds), "--steps", str(steps), "--warmup", str(warmup), *extra]  # fmt: skip
    start = load_average()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=HERE)
    out = done.stdout
    if done.returncode != 0:
        return {"error": (done.stderr or out)[-600:]}
    med = dict(re.findall(r"^(\w+)\s.*median\s+([\d.]+) ms/step", out, re.M))
    roof = dict(re.findall(r"^\s+(\w+)\s+\d+ GFLOP/s =\s+(\d+)% of the roof", out, re.M))
    ratio = re.search(r"ratio singa/pytorch.*?: ([\d.]+)x", out)
    step_roof = re.search(r"^\s+singa\s+(\d+)% of its step roofline", out, re.M)
    return {"singa": med.get("singa"), "pytorch": med.get("pytorch"),
            "ratio": ratio.group(1) if ratio else None, "roof": roof, "start": start,
            "step_roof": step_roof.group(1) if step_roof else "?",
            "end": load_average(), "out": out}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[2, 1])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--avx2", action="store_true")
    ap.add_argument("--only", nargs="+", choices=sorted(EXAMPLES), default=None)
    args = ap.parse_args()
    env = dict(os.environ)
    if args.avx2:
        env.update(AVX2)
        os.environ.update(AVX2)  # the facts printed below show the kernels chosen
    print_machine_facts(args.threads[0])
    if args.avx2:
        print("AVX2 code paths forced: " + ", ".join(f"{k}={v}" for k, v in AVX2.items()))
    print("| example | threads | singa ms | PyTorch ms | ratio | singa / PyTorch of the "
          "SGEMM roof | singa of its step roofline | load start → end |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for threads in args.threads:
        for name in args.only or EXAMPLES:
            r = run(name, threads, args.quick, env)
            if "error" in r:
                print(f"| {name} | {threads} | failed: {r['error']!r} |")
                continue
            roof = f"{r['roof'].get('singa', '?')}% / {r['roof'].get('pytorch', '?')}%"
            load = f"{r['start'].removeprefix('load average ')} → " + r["end"].removeprefix(
                "load average "
            )
            print(f"| {name} | {threads} | {r['singa']} | {r['pytorch']} | {r['ratio']}x | "
                  f"{roof} | {r['step_roof']}% | {load} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
