"""MNIST MLP training steps with TensorBoard logging off, on, and on with histograms.

    python benchmarks/tensorboard_logging.py [--rounds 10] [--steps 20] [--threads 2]

Each variant runs SINGA's MNIST MLP (examples/mnist/job.conf, batch 64) on the in-process
engine and displays every ``disp_freq`` = 10 steps as the training loop does: the step,
the Reporter's ``step_done``, and at display steps the metrics line (stdout suppressed,
metrics.jsonl written in every variant). "off" has no TensorBoard log; "on" writes the
scalars (singa's default when singa-classic[tensorboard] is installed); "histograms" also
writes every Param's value and gradient histogram at display steps (``--histograms``).
The variants share one net and alternate in rounds of whole display periods, so a shared
machine's drifting speed affects them alike. Prints the machine facts, each variant's
mean ms/step (display steps included) and the ratios to "off".
"""

from __future__ import annotations

import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

from _common import REPO, interleaved, mnist_stores, standard_args

try:  # a _common whose standard_args prints the machine facts itself
    from _common import print_machine_facts  # noqa: F401

    FACTS_PRINTED = True
except ImportError:
    FACTS_PRINTED = False


def machine_facts(threads: int) -> str:
    import numpy as np

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"machine: {cpu}, {os.cpu_count()} cores, python {platform.python_version()}, "
        f"numpy {np.__version__}, {threads} BLAS thread(s)"
    )


def main() -> None:
    args = standard_args(__doc__.splitlines()[0], rounds=10, steps=20, warmup=10)
    from singa_core.blas import set_blas_threads
    from singa_core.jobconf.parse import load_job
    from singa_core.plugin_host.host import get_host
    from singa_core.running.job import prepare_job
    from singa_core.running.reporting import Reporter
    from singa_core.running.tensorboard import GradientHistograms, TensorBoardLog, param_histograms
    from singa_core.running.training import pop_net_metrics

    if not FACTS_PRINTED:
        print(machine_facts(args.threads))
    stores = mnist_stores()
    ws = Path(tempfile.mkdtemp(prefix="singa-bench-tb-"))
    cfg = load_job(
        REPO / "examples" / "mnist" / "job.conf",
        [
            f"neuralnet.layer[0].store_conf.path={stores / 'train_data.bin'}",
            f"neuralnet.layer[1].store_conf.path={stores / 'test_data.bin'}",
            f"cluster.workspace={ws}",
            "test_steps=0",
            f"num_openblas_threads={args.threads}",
        ],
    )
    host = get_host()
    prepared = prepare_job(cfg, host, seed=0)
    engine = host.get("engine", "inprocess")(prepared, Reporter(quiet=True))
    set_blas_threads(args.threads)
    engine._init_params()
    loop = engine._loop()
    net, worker, stub, lr = engine.train_net, engine.worker, loop.stub, engine.updater.lr
    disp = int(prepared.job.disp_freq)
    if args.steps % disp:
        raise SystemExit(f"--steps must be a multiple of disp_freq ({disp})")

    def variant(name: str, board: TensorBoardLog | None):
        devnull = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the benchmark
        reporter = Reporter(
            out=devnull,
            err=devnull,
            live=False,
            metrics_path=ws / name / "metrics.jsonl",
            tensorboard=board,
        )
        reporter.start(0, 1 << 30)
        hist = reporter.param_histograms

        def step(s: int) -> None:  # the training loop's step and display path
            shown = s % disp == 0
            st = GradientHistograms(stub) if hist and shown else stub
            t0 = time.perf_counter()
            worker.train_one_batch(s, net, st)
            reporter.step_done(s, time.perf_counter() - t0)
            t1 = time.perf_counter()
            if shown:
                metrics = pop_net_metrics(net)
                metrics["lr"] = lr(s)
                reporter.metrics("Train", s, metrics)
                if st is not stub:
                    values = param_histograms(net.owner_params, grads=False)
                    reporter.histograms(s, {**values, **st.hists})
            reporting[name] += time.perf_counter() - t1

        return step, reporter

    # seconds spent after the steps (step_done and the display path), per variant; the
    # histograms' gradient part runs inside the step (GradientHistograms) and is in the steps
    reporting = {"off": 0.0, "on": 0.0, "histograms": 0.0}
    fns, reporters = {}, []
    for name, board in (
        ("off", None),
        ("on", TensorBoardLog(ws / "on" / "tensorboard")),
        ("histograms", TensorBoardLog(ws / "histograms" / "tensorboard", histograms=True)),
    ):
        fns[name], rep = variant(name, board)
        reporters.append(rep)
    times = interleaved(fns, args.rounds, args.steps, args.warmup)
    for rep in reporters:
        rep.finish()
    n_values = net.num_param_values()
    print(
        f"MNIST MLP batch 64, {n_values:,} parameter values, display every {disp} steps, "
        f"{args.rounds} rounds x {args.steps} steps"
    )
    means = {k: 1000 * statistics.fmean(v) for k, v in times.items()}
    for name, t in times.items():
        ms = [x * 1000 for x in t]
        print(
            f"  {name:<11} mean {means[name]:7.2f} ms/step  median {statistics.median(ms):7.2f}"
            f"  ({means[name] / means['off']:.3f}x off)"
        )
    print(
        f"TensorBoard scalars cost {100 * (means['on'] / means['off'] - 1):+.1f}% per step; "
        f"with histograms {100 * (means['histograms'] / means['off'] - 1):+.1f}%"
    )
    n = {k: len(v) + args.warmup for k, v in times.items()}
    med_off = statistics.median(times["off"]) * 1000
    for name in ("off", "on"):
        per = 1000 * reporting[name] / n[name]
        print(
            f"  reporting path {name:<3}: {per:.4f} ms/step "
            f"({100 * per / med_off:.3f}% of the median step off)"
        )
    extra = 1000 * (reporting["on"] - reporting["off"]) / n["on"]
    print(f"TensorBoard scalars measured alone: {extra:+.4f} ms/step")


if __name__ == "__main__":
    main()
