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

from _common import REPO, compare_with_pytorch, mnist_stores, singa_train_step, standard_args


def singa_step(stores, threads: int):
    overrides = [
        f"neuralnet.layer[0].store_conf.path={stores / 'train_data.bin'}",
        f"neuralnet.layer[1].store_conf.path={stores / 'test_data.bin'}",
    ]
    return singa_train_step(REPO / "examples" / "mnist" / "job.conf", overrides, threads)


def torch_step(threads: int, *, foreach: bool | None = None):
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
    opt = torch.optim.SGD(model.parameters(), lr=0.001, foreach=foreach)
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
    args = standard_args(__doc__.splitlines()[0], rounds=10, steps=20, warmup=10)
    sides = {
        "singa": (singa_step, (mnist_stores(), args.threads)),
        "pytorch": (torch_step, (args.threads,)),
    }
    compare_with_pytorch("MNIST MLP batch 64", sides, args)


if __name__ == "__main__":
    main()
