"""Roofline of the spatial layers: each kernel's time against what the machine allows.

    python benchmarks/conv_roofline.py [--threads 1] [--repeat 15]

Measures the machine's two peaks in this run at the thread count asked for — memcpy
bandwidth (a 64 MiB copy, bytes read + written per second) and SGEMM throughput (singa's
GEMM, the one the layers call, on a 1024³ product) — then times forward and backward of every
convolution, pooling, LRN and ReLU layer of SINGA's CIFAR-10 net (batch 100) and LeNet
(batch 64) alone, on batch-innermost inputs as in the nets, and prints per kernel:

* GFLOP (multiply-adds counted as 2) and the bytes it must move at the least (its inputs
  read once, its outputs written once; for convolutions, also the bytes this
  implementation's column buffer adds);
* the roofline bound ``max(FLOP / GEMM peak, bytes / memcpy bandwidth)`` and the measured
  time (minimum of ``--repeat``), and their ratio.

A kernel at 1.0x of its bound cannot get faster on this machine without a better GEMM or
more bandwidth; the ratio says how much is left.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
from _common import best_seconds, load_average, memcpy_bandwidth, print_machine_facts

from singa_core.blas import gemm, set_blas_threads
from singa_core.layer import kBackward, kForward, kTrain
from singa_core.testing import SourceLayer, build

F4 = 4  # bytes per float32


def peaks(repeat: int, threads: int) -> tuple[float, float]:
    """(memcpy GB/s counting read + write, on ``threads`` threads; singa's SGEMM GFLOP/s on
    1024³ at the thread count set, the GEMM the layers call)."""
    bw = memcpy_bandwidth(threads, repeat)
    a = np.random.default_rng(1).random((1024, 1024), dtype=np.float32)
    c = np.empty_like(a)
    flops = 2 * 1024**3 / best_seconds(lambda: gemm(a, a, c), repeat) / 1e9
    return bw, flops


def batch_innermost_source(shape, grad: bool) -> SourceLayer:
    b, c, h, w = shape
    x = np.random.default_rng(2).standard_normal((c, h, w, b)).astype(np.float32)
    src = SourceLayer(np.zeros((1, 1, 1, 1)), grad=grad)
    src.data = x.transpose(3, 0, 1, 2)
    src.grad = np.zeros_like(src.data) if grad else None
    return src


def layer(kind: str, conf: str, shape, grad: bool):
    from singa_builtins.layers.cconvolution import CConvolutionLayer
    from singa_builtins.layers.cpooling import CPoolingLayer
    from singa_builtins.layers.lrn import LRNLayer
    from singa_builtins.layers.relu import ReLULayer

    cls, field = {
        "conv": (CConvolutionLayer, "convolution_conf"),
        "pool": (CPoolingLayer, "pooling_conf"),
        "lrn": (LRNLayer, "lrn_conf"),
        "relu": (ReLULayer, None),
    }[kind]
    params = 'param { name: "w" } param { name: "b" }' if kind == "conv" else ""
    text = f'name: "l" {field} {{ {conf} }} {params}' if field else 'name: "l"'
    src = batch_innermost_source(shape, grad)
    lay = build(cls, text, [src])
    lay.grad[...] = 0.01
    return lay, src


def traffic(kind: str, lay, src, grad: bool) -> tuple[float, float, float, float]:
    """(forward FLOP, forward bytes, backward FLOP, backward bytes), the least each must
    move; a convolution's column buffer is added as the implementation's own traffic."""
    x, y = src.data.size * F4, lay.data.size * F4
    if kind == "conv":
        f, b = lay.flops([src])
        w = lay.weight.value.size * F4
        if lay._rows:
            col = lay._xcol.size * F4  # written once, read by the kh GEMMs' packing
        elif getattr(lay, "_blocks", None) is not None:
            col = 0  # unfolded a block at a time, each block within the L2 cache
        else:
            col = lay._col.size * F4
        fwd_bytes = x + w + y + 2 * col
        bwd_bytes = y + x + 2 * w + (x + 2 * col if grad else 0)
        return f, fwd_bytes, b, bwd_bytes
    if kind == "pool":
        arg = lay.data.size  # uint8 offsets
        return 0.0, x + y + arg, 0.0, y + arg + x
    if kind == "lrn":
        return 0.0, x + 2 * y, 0.0, 3 * y + x
    return 0.0, x + y, 0.0, 2 * y + x  # relu


NETS = {
    "CIFAR-10": [
        ("conv1", "conv", "num_filters: 32 kernel: 5 pad: 2", (100, 3, 32, 32), False),
        ("pool1", "pool", "pool: MAX kernel: 3 stride: 2", (100, 32, 32, 32), True),
        ("relu1", "relu", "", (100, 32, 15, 15), True),
        ("norm1", "lrn", "local_size: 3 alpha: 5e-05 beta: 0.75", (100, 32, 15, 15), True),
        ("conv2", "conv", "num_filters: 32 kernel: 5 pad: 2", (100, 32, 15, 15), True),
        ("pool2", "pool", "pool: AVG kernel: 3 stride: 2", (100, 32, 15, 15), True),
        ("conv3", "conv", "num_filters: 64 kernel: 5 pad: 2", (100, 32, 7, 7), True),
        ("pool3", "pool", "pool: AVG kernel: 3 stride: 2", (100, 64, 7, 7), True),
    ],
    "LeNet": [
        ("conv1", "conv", "num_filters: 20 kernel: 5", (64, 1, 28, 28), False),
        ("pool1", "pool", "pool: MAX kernel: 2 stride: 2", (64, 20, 24, 24), True),
        ("conv2", "conv", "num_filters: 50 kernel: 5", (64, 20, 12, 12), True),
        ("pool2", "pool", "pool: MAX kernel: 2 stride: 2", (64, 50, 8, 8), True),
    ],
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    print_machine_facts(args.threads)
    set_blas_threads(args.threads)
    bw, peak = peaks(args.repeat, args.threads)
    print(f"peaks at {args.threads} thread(s): memcpy {bw:.1f} GB/s (read + write), "
          f"singa's SGEMM 1024^3 {peak:.1f} GFLOP/s")  # fmt: skip
    head = f"{'layer':14s} {'pass':4s} {'GFLOP':>7s} {'MB':>7s} {'bound ms':>9s} {'ms':>7s}"
    for net, layers in NETS.items():
        print(f"\n{net}\n{head}  x bound  limited by")
        total = {"bound": 0.0, "ms": 0.0}
        for name, kind, conf, shape, grad in layers:
            lay, src = layer(kind, conf, shape, grad)
            ff, fb, bf, bb = traffic(kind, lay, src, grad)

            def fwd_only(lay=lay, src=src):
                lay.forward(kTrain | kForward, [src])

            fwd = best_seconds(fwd_only, args.repeat)

            def both(lay=lay, src=src):
                lay.forward(kTrain | kForward, [src])
                lay.backward(kTrain | kBackward, [src])

            bwd = max(best_seconds(both, args.repeat) - fwd, 0.0)
            for label, flop, nbytes, sec in (("fwd", ff, fb, fwd), ("bwd", bf, bb, bwd)):
                t_flop, t_mem = flop / (peak * 1e9), nbytes / (bw * 1e9)
                bound = max(t_flop, t_mem)
                total["bound"] += bound
                total["ms"] += sec
                print(
                    f"{net[:5] + ' ' + name:14s} {label:4s} {flop / 1e9:7.3f} "
                    f"{nbytes / 1e6:7.1f} {bound * 1e3:9.2f} {sec * 1e3:7.2f}  "
                    f"{sec / bound:6.1f}x  {'GEMM' if t_flop >= t_mem else 'memory'}"
                )
        print(
            f"{net} spatial layers: bound {total['bound'] * 1e3:.1f} ms, measured "
            f"{total['ms'] * 1e3:.1f} ms ({total['ms'] / total['bound']:.2f}x)"
        )
    print(f"({load_average()} at the end; SINGA_NUMBA={os.environ.get('SINGA_NUMBA', '1')})")


if __name__ == "__main__":
    main()
