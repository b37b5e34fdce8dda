"""char-rnn (examples/char-rnn/job.conf: GRU 512, 50 streams × 50 unrolled steps, 65
characters, RMSProp with clipping): singa kBPTT vs PyTorch CPU, same run.

    python benchmarks/char_rnn.py [--rounds 4] [--steps 5] [--threads 2] [--hidden 512]

Times one training step (reading the window, 50 unrolled forward steps, back-propagation
through time, one RMSProp update of every Param) on singa's in-process engine, then the same
model in PyTorch CPU: one-hot input, ``torch.nn.GRU`` (its fused kernel; the same gate
formula, reset applied after the hidden matmul), a Linear layer, cross-entropy over the
2,500 characters, ``clip_grad_value_(5)`` and ``torch.optim.RMSprop(alpha=0.95)``. Same
thread count for both, timed in alternating rounds. PyTorch is optional.
"""

from __future__ import annotations

from _common import (
    REPO,
    char_rnn_texts,
    compare_with_pytorch,
    singa_train_step,
    standard_args,
)

VOCAB, BATCH, UNROLL = 65, 50, 50


def singa_step(texts, threads: int, hidden: int):
    overrides = [f"neuralnet.layer[4].gru_conf.dim_hidden={hidden}"]
    for i, name in ((0, "train.txt"), (1, "val.txt")):
        overrides += [
            f"neuralnet.layer[{i}].char_rnn_conf.path={texts / name}",
            f"neuralnet.layer[{i}].char_rnn_conf.vocab_path={texts / 'vocab.txt'}",
        ]
    return singa_train_step(REPO / "examples" / "char-rnn" / "job.conf", overrides, threads)


def torch_step(texts, threads: int, hidden: int, *, foreach: bool | None = None):
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    vocab = (texts / "vocab.txt").read_text()
    index = {c: k for k, c in enumerate(vocab)}
    text = (texts / "train.txt").read_text()
    codes = torch.tensor([index[c] for c in text], dtype=torch.long)
    stride = len(codes) // BATCH
    starts = torch.arange(BATCH) * stride
    steps = torch.arange(UNROLL + 1)[:, None]
    gru = torch.nn.GRU(VOCAB, hidden)
    out = torch.nn.Linear(hidden, VOCAB)
    params = [*gru.parameters(), *out.parameters()]
    for p in params:
        torch.nn.init.uniform_(p, -0.08, 0.08)
    opt = torch.optim.RMSprop(params, lr=0.002, alpha=0.95, foreach=foreach)
    loss_fn = torch.nn.CrossEntropyLoss()
    eye = torch.eye(VOCAB)

    def step(i):
        offset = (i * UNROLL) % (stride - UNROLL - 1)
        window = codes[starts + offset + steps]  # (UNROLL + 1, BATCH)
        x = eye[window[:-1]]  # one-hot (UNROLL, BATCH, VOCAB)
        opt.zero_grad(set_to_none=False)
        h, _ = gru(x)
        loss = loss_fn(out(h).reshape(-1, VOCAB), window[1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_value_(params, 5.0)
        opt.step()

    return step


def main() -> None:
    args = standard_args(
        __doc__.splitlines()[0],
        rounds=4,
        steps=5,
        warmup=3,
        extra=lambda ap: ap.add_argument("--hidden", type=int, default=512),
    )
    texts = char_rnn_texts()
    sides = {
        "singa": (singa_step, (texts, args.threads, args.hidden)),
        "pytorch": (torch_step, (texts, args.threads, args.hidden)),
    }
    compare_with_pytorch(f"char-rnn GRU {args.hidden}, batch {BATCH}x{UNROLL}", sides, args)


if __name__ == "__main__":
    main()
