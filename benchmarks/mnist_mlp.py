"""MNIST MLP (SINGA's examples/mnist/job.conf, batch 64): singa vs PyTorch CPU, same run.

    python benchmarks/mnist_mlp.py [--rounds 10] [--steps 20] [--threads 2]

Times one training step (data reading, forward, backward, SGD update through the
parameter-server seam) of singa's in-process engine, then the same model in PyTorch CPU
(preloaded tensors, torch.optim.SGD), with the same number of BLAS/intra-op threads, and
prints both medians and their ratio. The two are timed in alternating rounds so that a
shared machine's drifting speed affects both alike. PyTorch is optional: without it
only singa is timed.
"""

from __future__ import annotations

import argparse
import sys

from _common import REPO, interleaved, median_ms, mnist_stores, singa_train_step, summary


def singa_step(stores, threads: int):
    overrides = [
        f"neuralnet.layer[0].store_conf.path={stores / 'train_data.bin'}",
        f"neuralnet.layer[1].store_conf.path={stores / 'test_data.bin'}",
    ]
    return singa_train_step(REPO / "examples" / "mnist" / "job.conf", overrides, threads)


def torch_step(threads: int):
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    sizes = [784, 2500, 2000, 1500, 1000, 500, 10]
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(torch.nn.Tanh())
    model = torch.nn.Sequential(*layers)
    opt = torch.optim.SGD(model.parameters(), lr=0.001)
    loss_fn = torch.nn.CrossEntropyLoss()
    x = torch.randn(64 * 16, 784)
    y = torch.randint(0, 10, (64 * 16,))

    def step(i):
        j = (i % 16) * 64
        opt.zero_grad(set_to_none=False)
        loss = loss_fn(model(x[j : j + 64]), y[j : j + 64])
        loss.backward()
        opt.step()

    return step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--steps", type=int, default=20, help="steps per round")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    fns = {"singa": singa_step(mnist_stores(), args.threads)}
    torch_fn = torch_step(args.threads)
    if torch_fn is not None:
        fns["pytorch"] = torch_fn
    times = interleaved(fns, args.rounds, args.steps, args.warmup)
    for name, t in times.items():
        print(f"{name:8s} MNIST MLP batch 64, {args.threads} thread(s): {summary(t)}")
    if torch_fn is None:
        print("pytorch  not installed: pip install torch==2.13.0 for the comparison")
        return
    ratio = median_ms(times["singa"]) / median_ms(times["pytorch"])
    print(f"ratio singa/pytorch (median): {ratio:.2f}x")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
