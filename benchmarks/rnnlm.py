"""rnnlm (examples/rnnlm/job.conf, SINGA 0.3's user-extension example: windows of up to 10
words, embedding and sigmoid recurrence of 15, class-factorised softmax over 3720 words in
100 classes, SGD): singa with the singa-rnnlm plugin vs PyTorch CPU, same run.

    python benchmarks/rnnlm.py [--rounds 10] [--steps 500] [--threads 1]

Times one training step (reading a window, forward, back-propagation through the window,
one SGD update of the four Params) on singa's in-process engine with the plugin from
examples/rnnlm (registered in-process when singa-rnnlm is not pip-installed), on the
corpus of ``singa data rnnlm-shakespeare``; then the same model in PyTorch CPU on the same
windows: ``E[words]``, the recurrence step by step, ``log_softmax`` over the classes and
over each word's class slice of the word weights, ``torch.optim.SGD``. Same thread count for
both (default 1, as job.conf), timed in alternating rounds. PyTorch is optional.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from _common import REPO, compare_with_pytorch, singa_train_step, standard_args

EXAMPLE = REPO / "examples" / "rnnlm"
VOCAB, CLASSES, DIM, LR = 3720, 100, 15, 0.1


def rnnlm_plugin():
    """The singa-rnnlm plugin, registered with the plugin host (from examples/rnnlm when
    the distribution is not installed)."""
    from singa_core.plugin_host.host import get_host
    from singa_core.plugin_host.registry import Provider

    host = get_host()
    if "singa-rnnlm" not in {dist for dist, _ in host.distributions()}:
        sys.path.insert(0, str(EXAMPLE))
        from singa_rnnlm import __version__, plugin

        host.add_plugin(
            plugin, name="rnnlm", provider=Provider("rnnlm", "singa-rnnlm", __version__)
        )
    return host


def corpus() -> Path:
    """examples/rnnlm's stores if converted, else a temp conversion of tiny-shakespeare."""
    if all((EXAMPLE / n).exists() for n in ("train_data.bin", "valid_data.bin")):
        return EXAMPLE
    from singa_core.commands.datasets import prepare_dataset

    out = Path(tempfile.mkdtemp(prefix="singa-bench-rnnlm-"))
    src = Path(os.environ.get("SINGA_DATA", str(REPO.parent / "shared" / "data")))
    conv = rnnlm_plugin().get("dataset", "rnnlm-shakespeare")()
    prepare_dataset(conv, out, src / "tinyshakespeare")
    return out


def job_conf(data: Path) -> Path:
    text = (EXAMPLE / "job.conf").read_text()
    for name in ("train_data.bin", "valid_data.bin"):
        text = text.replace(f'"examples/rnnlm/{name}"', f'"{data / name}"')
    path = Path(tempfile.mkdtemp(prefix="singa-bench-rnnlm-")) / "job.conf"
    path.write_text(text)
    return path


def windows(data: Path, n: int) -> list:
    """The first ``n`` windows kData reads from the training store (slot rows as ints)."""
    from singa_rnnlm.data import RnnlmDataLayer

    from singa_core.layer import kForward, kTrain
    from singa_core.testing import build

    layer = build(
        RnnlmDataLayer,
        f'name: "data" [singa_rnnlm.data_conf] {{ path: "{data / "train_data.bin"}" '
        "max_window: 10 }",
        [],
    )
    out = []
    for _ in range(n):
        layer.forward(kTrain | kForward, [])
        out.append(layer.records[: layer.window + 1].copy())
    return out


def torch_step(wins, threads: int):
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(threads)
    torch.manual_seed(0)

    def param(*shape):
        return torch.nn.Parameter(torch.empty(*shape).uniform_(-0.3, 0.3))

    emb, rec, word_w, class_w = (
        param(VOCAB, DIM),
        param(DIM, DIM),
        param(VOCAB, DIM),
        param(CLASSES, DIM),
    )
    opt = torch.optim.SGD([emb, rec, word_w, class_w], lr=LR)
    wins = [torch.as_tensor(w) for w in wins]

    def step(i):
        win = wins[i % len(wins)]
        w = win.shape[0] - 1
        x = emb[win[:w, 0]]
        h = [torch.sigmoid(x[0])]
        for t in range(1, w):
            h.append(torch.sigmoid(h[-1] @ rec + x[t]))
        hs = torch.stack(h)
        labels = win[1:]
        nll = -torch.log_softmax(hs @ class_w.T, dim=1).gather(1, labels[:, 1:2]).sum()
        for t, (wid, _, s, e) in enumerate(labels.tolist()):
            nll = nll - torch.log_softmax(word_w[s:e] @ hs[t], dim=0)[wid - s]
        opt.zero_grad()
        nll.backward()
        opt.step()

    return step


def main() -> None:
    # 1 thread by default: job.conf's num_openblas_threads
    args = standard_args(__doc__.splitlines()[0], rounds=10, steps=500, warmup=200, threads=1)
    data = corpus()
    count = args.warmup + args.rounds * args.steps + 1
    sides = {
        "singa": (singa_side, (data, args.threads)),
        "pytorch": (torch_side, (data, count, args.threads)),
    }
    compare_with_pytorch(
        "rnnlm window of <= 10 words, 3720 words / 100 classes, dim 15", sides, args
    )


def singa_side(data: Path, threads: int):
    rnnlm_plugin()
    return singa_train_step(job_conf(data), [], threads)


def torch_side(data: Path, count: int, threads: int):
    rnnlm_plugin()
    return torch_step(windows(data, count), threads)


if __name__ == "__main__":
    main()
