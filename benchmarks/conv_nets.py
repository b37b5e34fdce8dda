"""Convolutional nets: singa vs PyTorch CPU in the same run.

    python benchmarks/conv_nets.py [--net lenet|cifar10|both] [--rounds 8] [--steps 10]
                                   [--threads 2]

* lenet: SINGA's examples/mnist/conv.conf (batch 64): conv 20 k5 → max-pool 2/2 → conv 50
  k5 → max-pool 2/2 → ip 500 → ReLU → ip 10 → softmax loss; SGD momentum 0.9, wd 5e-4.
* cifar10: SINGA's examples/cifar10/job.conf (batch 100): conv 32 k5 p2 → max-pool 3/2 →
  ReLU → LRN(3) → conv 32 k5 p2 → ReLU → avg-pool 3/2 → LRN(3) → conv 64 k5 p2 → ReLU →
  avg-pool 3/2 → ip 10 → softmax loss; SGD momentum 0.9, wd 4e-3.

A singa step reads a batch from the kvfile store, runs forward, backward and the update
through the parameter-server seam of the in-process engine. The PyTorch version is the
same model (floor-mode pooling, local_response_norm, torch.optim.SGD with the same
momentum/weight decay) on preloaded tensors, with the same number of intra-op/BLAS
threads. Both are timed in alternating rounds; the medians and their ratio are printed.
PyTorch is optional: without it only singa is timed.
"""

from __future__ import annotations

from _common import (
    REPO,
    cifar10_stores,
    compare_with_pytorch,
    median_ms,
    mnist_stores,
    singa_train_step,
    standard_args,
)


def singa_lenet(threads: int):
    stores = mnist_stores()
    overrides = [
        f"neuralnet.layer[0].store_conf.path={stores / 'train_data.bin'}",
        f"neuralnet.layer[1].store_conf.path={stores / 'test_data.bin'}",
    ]
    return singa_train_step(REPO / "examples" / "mnist" / "conv.conf", overrides, threads)


def singa_cifar10(threads: int):
    stores = cifar10_stores()
    mean = stores / "image_mean.bin"
    overrides = [
        f"neuralnet.layer[0].store_conf.path={stores / 'train_data.bin'}",
        f"neuralnet.layer[0].store_conf.mean_file={mean}",
        f"neuralnet.layer[1].store_conf.path={stores / 'test_data.bin'}",
        f"neuralnet.layer[1].store_conf.mean_file={mean}",
    ]
    return singa_train_step(REPO / "examples" / "cifar10" / "job.conf", overrides, threads)


def _torch_step(torch, model, opt, x, y, batch):
    loss_fn = torch.nn.CrossEntropyLoss()
    n = x.shape[0] // batch

    def step(i):
        j = (i % n) * batch
        opt.zero_grad(set_to_none=False)
        loss = loss_fn(model(x[j : j + batch]), y[j : j + batch])
        loss.backward()
        opt.step()

    return step


def torch_lenet(threads: int, *, foreach: bool | None = None):
    try:
        import torch
    except ImportError:
        return None
    nn = torch.nn
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 20, 5),
        nn.MaxPool2d(2, 2),
        nn.Conv2d(20, 50, 5),
        nn.MaxPool2d(2, 2),
        nn.Flatten(),
        nn.Linear(800, 500),
        nn.ReLU(),
        nn.Linear(500, 10),
    )
    opt = torch.optim.SGD(
        model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4, foreach=foreach
    )
    x = torch.rand(64 * 16, 1, 28, 28)
    y = torch.randint(0, 10, (64 * 16,))
    return _torch_step(torch, model, opt, x, y, 64)


def torch_cifar10(threads: int, *, lrn: bool = True, foreach: bool | None = None):
    try:
        import torch
    except ImportError:
        return None
    nn = torch.nn
    torch.set_num_threads(threads)
    torch.manual_seed(0)

    class LRN(nn.Module):
        def forward(self, x):
            if not lrn:  # a lower bound for PyTorch: its local_response_norm is slow
                return x
            return nn.functional.local_response_norm(x, 3, alpha=5e-5, beta=0.75, k=1.0)

    model = nn.Sequential(
        nn.Conv2d(3, 32, 5, padding=2),
        nn.MaxPool2d(3, 2),
        nn.ReLU(),
        LRN(),
        nn.Conv2d(32, 32, 5, padding=2),
        nn.ReLU(),
        nn.AvgPool2d(3, 2),
        LRN(),
        nn.Conv2d(32, 64, 5, padding=2),
        nn.ReLU(),
        nn.AvgPool2d(3, 2),
        nn.Flatten(),
        nn.Linear(576, 10),
    )
    opt = torch.optim.SGD(
        model.parameters(), lr=0.001, momentum=0.9, weight_decay=4e-3, foreach=foreach
    )
    x = torch.randn(100 * 8, 3, 32, 32) * 60
    y = torch.randint(0, 10, (100 * 8,))
    return _torch_step(torch, model, opt, x, y, 100)


def torch_cifar10_without_lrn(threads: int):
    return torch_cifar10(threads, lrn=False)


NETS = {
    "lenet": ("LeNet (MNIST conv.conf) batch 64", singa_lenet, torch_lenet, None),
    "cifar10": (
        "CIFAR-10 job.conf batch 100",
        singa_cifar10,
        torch_cifar10,
        torch_cifar10_without_lrn,
    ),
}


def main() -> None:
    args = standard_args(
        __doc__.splitlines()[0],
        rounds=8,
        steps=10,
        warmup=5,
        extra=lambda ap: ap.add_argument("--net", choices=[*NETS, "both"], default="both"),
    )
    for key in NETS if args.net == "both" else [args.net]:
        title, singa_fn, torch_fn, torch_bound_fn = NETS[key]
        sides = {"singa": (singa_fn, (args.threads,)), "pytorch": (torch_fn, (args.threads,))}
        if torch_bound_fn is not None:
            # PyTorch's local_response_norm goes through pooling and pow and is slow; the
            # same net without LRN bounds what a faster PyTorch LRN could reach
            sides["pytorch-without-lrn"] = (torch_bound_fn, (args.threads,))
        times = compare_with_pytorch(title, sides, args, key=key)
        if "pytorch-without-lrn" in times:
            bound = median_ms(times["singa"]) / median_ms(times["pytorch-without-lrn"])
            print(f"  (singa / pytorch without its LRN layers: {bound:.2f}x)")


if __name__ == "__main__":
    main()
