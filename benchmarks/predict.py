"""Inference speed: images per second of ``Model.predict`` beside PyTorch eval mode and
onnxruntime on the exported graph, in the same run, with the same threads.

    python benchmarks/predict.py [--net mlp|lenet|cifar10|all] [--threads 1] [--rounds 7]

For each net (SINGA's examples/mnist/job.conf MLP, examples/mnist/conv.conf LeNet,
examples/cifar10/job.conf) the script trains one step to get a checkpoint, loads it with
``job.model()``, builds the same network in PyTorch from those weights (eval mode, under
``torch.inference_mode()``; the input standardisation included, as it is in singa's and the
ONNX graph) and checks that the three agree, then times batches of 1, 64 and 1000 raw
samples in alternating rounds. singa's model (``job.model()``) runs a few rows on a net of
their own size (the next power of two), so a single sample costs a 1-row pass; the row
"singa fixed" is ``job.model(fixed_passes=True)``, every pass 64 rows (bit-identical rows
whatever the batch: a single sample pays a 64-row pass), as before issue 31. Then it prints
the batch-1 latency in ms of each and singa's time over PyTorch's at batch 1 (the target:
at most 1.2) and its throughput over PyTorch's at batch 1000.
PyTorch and onnxruntime are optional.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import REPO, cifar10_stores, load_average, mnist_stores, print_machine_facts

NETS = {
    "mlp": ("examples/mnist/job.conf", "mnist"),
    "lenet": ("examples/mnist/conv.conf", "mnist"),
    "cifar10": ("examples/cifar10/job.conf", "cifar10"),
}
BATCHES = (1, 64, 1000)


def overrides_for(data: str, ws: Path) -> list[str]:
    if data == "mnist":
        s = mnist_stores()
        out = [
            f"neuralnet.layer[0].store_conf.path={s / 'train_data.bin'}",
            f"neuralnet.layer[1].store_conf.path={s / 'test_data.bin'}",
        ]
    else:
        s = cifar10_stores()
        m = s / "image_mean.bin"
        out = [
            f"neuralnet.layer[0].store_conf.path={s / 'train_data.bin'}",
            f"neuralnet.layer[0].store_conf.mean_file={m}",
            f"neuralnet.layer[1].store_conf.path={s / 'test_data.bin'}",
            f"neuralnet.layer[1].store_conf.mean_file={m}",
        ]
    return out + [f"cluster.workspace={ws}"]


def trained_job(conf: str, data: str, ws: Path):
    from singa_core import Job

    overrides = overrides_for(data, ws)
    args = [
        sys.executable,
        "-m",
        "singa_core.commands.cli",
        "train",
        str(REPO / conf),
        "-q",
        "-o",
        "train_steps=1",
        "-o",
        "test_steps=0",
        "--no-tensorboard",
    ]
    for o in overrides:
        args += ["-o", o]
    subprocess.run(args, check=True, capture_output=True)
    return Job.from_file(REPO / conf, overrides=overrides)


def torch_model(model, torch):
    """The deploy net as a torch.nn.Sequential with the model's weights."""
    nn = torch.nn
    net = model.net
    mods = []
    for layer in net.layers:
        kind = type(layer).type_names[0]
        if layer.name == model.input_name:
            mean = torch.tensor(layer.mean if layer.mean is not None else 0.0)
            std = torch.tensor(layer.std if layer.std is not None else 1.0)
            shape = tuple(layer.instance_shape)

            class Standardise(nn.Module):
                def forward(self, x, mean=mean, std=std, shape=shape):
                    return ((x.reshape(x.shape[0], -1) - mean) / std).reshape(-1, *shape)

            mods.append(Standardise())
        elif kind == "kInnerProduct":
            lin = nn.Linear(layer.vdim, layer.hdim)
            w = torch.from_numpy(layer.weight.value)
            lin.weight.data = (w.T if layer.transpose else w).contiguous()
            lin.bias.data = torch.from_numpy(layer.bias.value)
            mods += [nn.Flatten(), lin]
        elif kind in ("kConvolution", "kCConvolution"):
            win = layer.win
            conv = nn.Conv2d(
                layer.channels,
                layer.num_filters,
                (win.kh, win.kw),
                stride=(win.sh, win.sw),
                padding=(win.ph, win.pw),
            )
            conv.weight.data = torch.from_numpy(layer.weight.value).reshape(conv.weight.shape)
            conv.bias.data = torch.from_numpy(layer.bias.value)
            mods.append(conv)
        elif kind in ("kPooling", "kCPooling"):
            win = layer.win
            k, s, p = (win.kh, win.kw), (win.sh, win.sw), (win.ph, win.pw)
            mods.append(
                nn.MaxPool2d(k, s, p)
                if layer.method == 0
                else nn.AvgPool2d(k, s, p, count_include_pad=True)
            )
        elif kind == "kLRN":
            mods.append(
                nn.LocalResponseNorm(
                    int(layer.conf.lrn_conf.local_size),
                    alpha=layer.alpha,
                    beta=layer.beta,
                    k=layer.knorm,
                )
            )
        elif kind == "kReLU":
            mods.append(nn.ReLU())
        elif kind == "kSTanh":

            class STanh(nn.Module):
                def forward(self, x):
                    return 1.7159047 * torch.tanh(0.66666667 * x)

            mods.append(STanh())
        elif kind == "kSoftmax":
            mods += [nn.Flatten(), nn.Softmax(dim=1)]
        elif kind in ("kDropout", "kSplit"):
            continue
        else:
            raise SystemExit(f"no PyTorch counterpart for {kind}")
    return nn.Sequential(*mods).eval()


def timed(fn, x, rounds: int) -> float:
    """Median seconds of fn(x) over ``rounds`` calls (each at least 0.2 s of work)."""
    fn(x)  # warm-up
    reps = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(reps):
            fn(x)
        if time.perf_counter() - t0 > 0.2 or reps >= 256:
            break
        reps *= 2
    samples = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn(x)
        samples.append((time.perf_counter() - t0) / reps)
    return statistics.median(samples)


def bench(name: str, threads: int, rounds: int) -> None:
    from threadpoolctl import threadpool_limits

    conf, data = NETS[name]
    with tempfile.TemporaryDirectory() as tmp:
        job = trained_job(conf, data, Path(tmp) / "ws")
        model = job.model()
        fixed = job.model(fixed_passes=True)
        rng = np.random.default_rng(0)
        x = rng.integers(0, 256, size=(1000, *model.sample_shape)).astype(np.float32)
        runners = {"singa": model.predict, "singa fixed": fixed.predict}
        ref = model.predict(x[:64])
        try:
            import torch

            torch.set_num_threads(threads)
            tm = torch_model(model, torch)

            def run_torch(a, tm=tm):
                with torch.inference_mode():
                    return tm(torch.from_numpy(a)).numpy()

            diff = np.abs(run_torch(x[:64]) - ref).max()
            print(f"  pytorch agrees with singa within {diff:.1e}")
            runners["pytorch"] = run_torch
        except ImportError:
            print("  pytorch not installed: pip install torch==2.13.0 for the comparison")
        try:
            import onnxruntime as ort

            from singa_core.inference.onnx_export import export_onnx

            path = Path(tmp) / "m.onnx"
            export_onnx(model, path)
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = threads
            opts.inter_op_num_threads = 1
            sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])

            def run_ort(a, sess=sess):
                return sess.run(["output"], {"input": a})[0]

            diff = np.abs(run_ort(x[:64]) - ref).max()
            print(f"  onnxruntime agrees with singa within {diff:.1e}")
            runners["onnxruntime"] = run_ort
        except ImportError:
            print("  onnxruntime not installed: pip install onnx onnxruntime for the comparison")
        with threadpool_limits(threads):
            rows = {}
            for bs in BATCHES:
                for who, fn in runners.items():
                    rows[(who, bs)] = bs / timed(fn, x[:bs], rounds)
        print(f"{name}: images/s ({threads} thread(s); {load_average()})")
        print(f"  {'':14s}" + "".join(f"{'batch ' + str(b):>14s}" for b in BATCHES))
        for who in runners:
            cells = [
                f"{rows[(who, b)]:14.0f}" if (who, b) in rows else f"{'':14s}" for b in BATCHES
            ]
            print(f"  {who:14s}" + "".join(cells))
        lat = "  batch-1 latency: " + ", ".join(
            f"{who} {1000 / rows[(who, 1)]:.2f} ms" for who in runners
        )
        print(lat)
        if "pytorch" in runners:
            r1 = rows[("pytorch", 1)] / rows[("singa", 1)]
            print(f"  singa / pytorch time at batch 1: {r1:.2f}x (target: at most 1.2x)")
            r = rows[("singa", 64)] / rows[("pytorch", 64)]
            print(f"  singa / pytorch throughput at batch 64: {r:.2f}x (time ratio {1 / r:.2f}x)")
            r = rows[("singa", 1000)] / rows[("pytorch", 1000)]
            print(f"  singa / pytorch throughput at batch 1000: {r:.2f}x")
        sys.stdout.flush()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--net", choices=[*NETS, "all"], default="all")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    print_machine_facts(args.threads)
    for name in NETS if args.net == "all" else [args.net]:
        bench(name, args.threads, args.rounds)


if __name__ == "__main__":
    main()
