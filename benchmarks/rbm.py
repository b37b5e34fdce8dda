"""RBM1 (SINGA's examples/rbm/rbm1.conf: batch 100, 784 -> 1000, CD-1): singa vs PyTorch CPU.

    python benchmarks/rbm.py [--rounds 10] [--steps 20] [--threads 2]

Times one training step of singa's in-process engine (data reading, the positive phase,
one Gibbs step, the CD gradient, the SGD update with momentum 0.8 and weight decay 0.0002
through the parameter-server seam), then a hand-written CD-1 of the same RBM in PyTorch
CPU (preloaded tensors, the same arithmetic and the same update rule), with the same
number of BLAS/intra-op threads, and prints both medians and their ratio. The two are
timed in alternating rounds so that a shared machine's drifting speed affects both alike.
PyTorch is optional (imported only here): without it only singa is timed.

singa's two products with the input (the positive phase's ``v·Wᵀ`` and the input's half
of the weight gradient) run over the input's nonzeros on the host where it is mostly zeros
(MNIST: 19% of the pixels; plugins/layers/_sparse_rows.py); PyTorch's hand-written CD-1
multiplies densely, as PyTorch does unless told to use sparse tensors, on inputs as sparse
(20% ones). ``SINGA_SPARSE_ROWS=0`` times singa's dense products instead.

SINGA 0.3 itself took 12.2 / 11.6 ms per step with 1 / 2 threads on the reference 2-core
machine, PyTorch 4.4 ms (reference §13).
"""

from __future__ import annotations

import os

from _common import REPO, compare_with_pytorch, mnist_stores, singa_train_step, standard_args

BATCH, VDIM, HDIM = 100, 784, 1000
LR, MOMENTUM, WEIGHT_DECAY = 0.1, 0.8, 0.0002


def singa_step(stores, threads: int):
    overrides = [
        f"neuralnet.layer[0].store_conf.path={stores / 'train_data.bin'}",
        f"neuralnet.layer[1].store_conf.path={stores / 'test_data.bin'}",
    ]
    return singa_train_step(REPO / "examples" / "rbm" / "rbm1.conf", overrides, threads)


def torch_step(threads: int):
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(threads)
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(HDIM, VDIM, generator=gen) * 0.1
    bv = torch.zeros(VDIM)
    bh = torch.zeros(HDIM)
    params = [w, bv, bh]
    decay = [WEIGHT_DECAY, 0.0, 0.0]  # biases: wd_scale 0
    history = [torch.zeros_like(p) for p in params]
    # MNIST-like inputs in [0, 1], preloaded (16 batches)
    x = (torch.rand(BATCH * 16, VDIM, generator=gen) > 0.8).float()

    def step(i):
        j = (i % 16) * BATCH
        v_pos = x[j : j + BATCH]
        h_pos = torch.sigmoid(torch.addmm(bh, v_pos, w.t()))
        h_sample = torch.bernoulli(h_pos, generator=gen)
        v_neg = torch.sigmoid(torch.addmm(bv, h_sample, w))
        h_neg = torch.sigmoid(torch.addmm(bh, v_neg, w.t()))
        error = float(((v_pos - v_neg) ** 2).sum()) / BATCH  # the reported metric
        grads = [
            (h_neg.t() @ v_neg - h_pos.t() @ v_pos) / BATCH,
            (v_neg.sum(0) - v_pos.sum(0)) / BATCH,
            (h_neg.sum(0) - h_pos.sum(0)) / BATCH,
        ]
        # SINGA's SGD: history = momentum·history − lr·(grad + wd·w); w += history
        for p, g, hist, wd in zip(params, grads, history, decay, strict=True):
            if wd:
                g.add_(p, alpha=wd)
            hist.mul_(MOMENTUM).add_(g, alpha=-LR)
            p.add_(hist)
        return error

    return step


def main() -> None:
    args = standard_args(__doc__.splitlines()[0], rounds=10, steps=20, warmup=10)
    sides = {
        "singa": (singa_step, (mnist_stores(), args.threads)),
        "pytorch": (torch_step, (args.threads,)),
    }
    dense = os.environ.get("SINGA_SPARSE_ROWS", "1").strip() == "0"
    note = (
        "singa's products all dense (SINGA_SPARSE_ROWS=0)"
        if dense
        else "singa's 2 products with the input over its nonzeros (19% of MNIST's pixels): "
        "the FLOP above are the dense products', so its share of the roof is an equivalent "
        "(SINGA_SPARSE_ROWS=0: all dense)"
    )
    compare_with_pytorch("RBM1 CD-1 batch 100, 784-1000", sides, args, note=note)


if __name__ == "__main__":
    main()
