"""kLRN forward+backward on the CIFAR-10 example's shapes: singa vs PyTorch CPU.

    python benchmarks/lrn_layer.py [--rounds 10] [--steps 50] [--threads 1]

Shapes: norm1 (100×32×15×15) and norm2 (100×32×7×7), local_size 3, alpha 5e-05, beta 0.75,
knorm 1 (examples/cifar10/job.conf). singa's layer is timed on two source layouts: NCHW
contiguous and the NCHW view of a batch-innermost (C, H, W, B) buffer, which is what the
convolution and pooling layers hand on. PyTorch's ``local_response_norm`` (same formula:
alpha/n, k = knorm) gets contiguous NCHW tensors, with ``torch.set_num_threads(--threads)``;
the default 1 matches singa, whose numpy ufuncs run on one thread. Rounds alternate between
the contestants so that a shared machine's drifting speed affects all alike. PyTorch is
optional: without it only singa is timed.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
from _common import REPO, interleaved, load_average, median_ms, print_machine_facts, summary

sys.path.insert(0, str(REPO))

from singa_builtins.layers.lrn import LRNLayer  # noqa: E402

from singa_core.layer import Layer, kBackward, kForward, kTrain  # noqa: E402
from singa_core.schema import job_pb2  # noqa: E402

SHAPES = {"norm1": (100, 32, 15, 15), "norm2": (100, 32, 7, 7)}
LOCAL_SIZE, ALPHA, BETA, KNORM = 3, 5e-05, 0.75, 1.0


class _Source(Layer):
    num_srclayers = (0, 0)

    def __init__(self, data: np.ndarray) -> None:
        super().__init__(job_pb2.LayerProto(name="src"))
        self.data = data
        self.grad = np.empty_like(data)

    def setup(self, srcs):
        pass

    def forward(self, phase, srcs):
        pass


def _inputs(shape, seed=0):
    rng = np.random.default_rng(seed)
    # post-ReLU/pooling activations of the CIFAR net are O(1..100) before norm1
    x = np.abs(rng.standard_normal(shape)).astype(np.float32) * 20
    g = rng.standard_normal(shape).astype(np.float32) * 1e-3
    return x, g


def singa_step(shape, layout: str):
    x, g = _inputs(shape)
    if layout == "batch-innermost":
        x = np.ascontiguousarray(x.transpose(1, 2, 3, 0)).transpose(3, 0, 1, 2)
    src = _Source(x)
    conf = job_pb2.LayerProto(name="norm", type=job_pb2.kLRN)
    c = conf.lrn_conf
    c.local_size, c.alpha, c.beta, c.knorm = LOCAL_SIZE, ALPHA, BETA, KNORM
    layer = LRNLayer(conf)
    layer.setup([src])
    layer.grad[...] = g
    fwd, bwd, srcs = kTrain | kForward, kTrain | kBackward, [src]

    def step(_i):
        layer.forward(fwd, srcs)
        layer.backward(bwd, srcs)

    return step


def torch_step(shape, threads: int):
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(threads)
    x, g = _inputs(shape)
    xt = torch.from_numpy(x).requires_grad_(True)
    gt = torch.from_numpy(g)
    lrn = torch.nn.functional.local_response_norm

    def step(_i):
        xt.grad = None
        y = lrn(xt, LOCAL_SIZE, alpha=ALPHA, beta=BETA, k=KNORM)
        y.backward(gt)

    return step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--steps", type=int, default=50, help="steps per round")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1, help="PyTorch intra-op threads")
    args = ap.parse_args()
    print_machine_facts(args.threads)
    for name, shape in SHAPES.items():
        fns = {
            "singa NCHW": singa_step(shape, "nchw"),
            "singa batch-innermost": singa_step(shape, "batch-innermost"),
        }
        torch_fn = torch_step(shape, args.threads)
        if torch_fn is not None:
            fns["pytorch"] = torch_fn
        times = interleaved(fns, args.rounds, args.steps, args.warmup)
        dims = "×".join(map(str, shape))
        print(f"{name} {dims}, local_size {LOCAL_SIZE}, beta {BETA}, forward+backward:")
        for who, t in times.items():
            print(f"  {who:22s} {summary(t)}")
        if torch_fn is None:
            print("  pytorch not installed: pip install torch==2.13.0 for the comparison")
            continue
        base = median_ms(times["pytorch"])
        for who in ("singa NCHW", "singa batch-innermost"):
            ratio = median_ms(times[who]) / base
            print(f"  ratio {who}/pytorch ({args.threads} thread(s)): {ratio:.2f}x")
        sys.stdout.flush()
    print(f"({load_average()} at the end)")


if __name__ == "__main__":
    main()
