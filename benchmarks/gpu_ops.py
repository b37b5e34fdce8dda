"""What one training step asks of a GPU, counted without one: singa on the standin:cuda
device (every kernel's CUDA code run on the CPU, each launch counted where the runtime
launches it) beside PyTorch eager's aten ops for the same nets.

    python benchmarks/gpu_ops.py [--nets mlp,lenet,cifar10,char-rnn] [--by-name 15]

For each net (the MNIST MLP, LeNet, the CIFAR-10 net with LRN, char-rnn's GRU 512 x 50 x
50) it runs singa's real training loop on the ``standin:cuda`` device
(``singa_core.testing.count_training_steps``) and prints per undisplayed step:

* kernels: launches observed: raw CUDA kernels and cuBLAS GEMMs as the emulated runtime
  runs them, and the array module's calls that launch work on a GPU;
* views: reshapes, transposes, slices (no device work);
* device reads: values read on the host (each stops the host until the GPU is done);
* copies in: host arrays sent to the device (the step's inputs and labels);

and what a displayed step adds (its metrics read). Beside them, where PyTorch is installed,
the aten ops PyTorch eager runs for the same step (forward, backward, ``zero_grad`` and the
optimizer with ``foreach=True``, CUDA's default), counted with a ``TorchDispatchMode`` on
the CPU, views excluded. Counts do not depend on the machine or its load; the machine
facts are printed anyway.
"""

from __future__ import annotations

import argparse
import sys

import _common
from _common import REPO, cifar10_stores, load_average, mnist_stores, print_machine_facts


def _mnist(conf: str):
    stores = mnist_stores()
    return REPO / "examples" / "mnist" / conf, [
        f"neuralnet.layer[0].store_conf.path={stores / 'train_data.bin'}",
        f"neuralnet.layer[1].store_conf.path={stores / 'test_data.bin'}",
    ]


def _cifar10():
    stores = cifar10_stores()
    mean = stores / "image_mean.bin"
    return REPO / "examples" / "cifar10" / "job.conf", [
        f"neuralnet.layer[0].store_conf.path={stores / 'train_data.bin'}",
        f"neuralnet.layer[0].store_conf.mean_file={mean}",
        f"neuralnet.layer[1].store_conf.path={stores / 'test_data.bin'}",
        f"neuralnet.layer[1].store_conf.mean_file={mean}",
    ]


def _char_rnn():
    texts = _common.char_rnn_texts()
    overrides = []
    for i, name in ((0, "train.txt"), (1, "val.txt")):
        overrides += [
            f"neuralnet.layer[{i}].char_rnn_conf.path={texts / name}",
            f"neuralnet.layer[{i}].char_rnn_conf.vocab_path={texts / 'vocab.txt'}",
        ]
    return REPO / "examples" / "char-rnn" / "job.conf", overrides


def _torch_builders():
    import char_rnn
    import conv_nets
    import mnist_mlp

    texts = _common.char_rnn_texts()
    return {
        "mlp": lambda: mnist_mlp.torch_step(1, foreach=True),
        "lenet": lambda: conv_nets.torch_lenet(1, foreach=True),
        "cifar10": lambda: conv_nets.torch_cifar10(1, foreach=True),
        "char-rnn": lambda: char_rnn.torch_step(texts, 1, 512, foreach=True),
    }


NETS = {
    "mlp": ("MNIST MLP, batch 64", lambda: _mnist("job.conf")),
    "lenet": ("LeNet, batch 64", lambda: _mnist("conv.conf")),
    "cifar10": ("CIFAR-10 net with LRN, batch 100", _cifar10),
    "char-rnn": ("char-rnn GRU 512, 50 x 50", _char_rnn),
}


def torch_aten_ops(step) -> int | None:
    """aten ops of one PyTorch step (after a warm-up step), views excluded."""
    try:
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode
    except ImportError:
        return None

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if not getattr(func, "is_view", False) and torch.Tag.view_copy not in func.tags:
                self.n += 1
            return func(*args, **(kwargs or {}))

    step(0)
    with Count() as c:
        step(1)
    return c.n


def main() -> None:
    from singa_core.testing.launches import count_training_steps

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nets", default=",".join(NETS))
    ap.add_argument("--by-name", type=int, default=0, metavar="N",
                    help="also print each net's N most frequent kernels")  # fmt: skip
    args = ap.parse_args()
    print_machine_facts(1)
    try:
        builders = _torch_builders()
    except ImportError:
        builders = {}
    print(
        f"{'net':34s} {'kernels':>8s} {'views':>7s} {'reads':>6s} {'copies in':>9s} "
        f"{'display +k/+r':>14s} {'PyTorch aten':>12s}"
    )
    for key in args.nets.split(","):
        title, make = NETS[key]
        conf, overrides = make()
        c = count_training_steps(conf, overrides)
        aten = None
        if key in builders:
            step = builders[key]()
            aten = torch_aten_ops(step) if step is not None else None
        print(
            f"{title:34s} {c.kernels:8.0f} {c.views:7.0f} {c.reads:6.0f} {c.to_device:9.0f} "
            f"{c.display_kernels:+7.0f}/{c.display_reads:+.0f}"
            f"{aten if aten is not None else 'n/a':>13}"
        )
        for name, n in list(c.by_name.items())[: args.by_name]:
            print(f"    {n:8.1f}  {name}")
        sys.stdout.flush()
    print(f"({load_average()} at the end; counts do not depend on it)")


if __name__ == "__main__":
    main()
