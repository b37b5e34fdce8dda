"""`singa time`'s per-layer table against a measured training step (MNIST MLP and LeNet).

    python benchmarks/layer_timing.py [--rounds 3] [--steps 10] [--threads 1]

For each net, alternately: `singa time`'s measurement (singa_core.commands.timing, --steps
iterations after 2 warm-up) and a real training run of the in-process engine's training
loop (--steps + 2 steps, checkpoints and tests off), whose Reporter records each step's
time. Prints the machine facts, the table's sum (layers + updater + engine) and the trained
step per round and their ratio, as medians and as the fastest steps (other processes on a
shared machine only add time, so the fastest steps are the steadier comparison).
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
from pathlib import Path

from _common import REPO, mnist_stores, standard_args
from tensorboard_logging import FACTS_PRINTED, machine_facts


def main() -> None:
    args = standard_args(__doc__.splitlines()[0], rounds=3, steps=10, warmup=2)
    from singa_core.blas import set_blas_threads
    from singa_core.commands.timing import time_training_step
    from singa_core.jobconf.parse import load_job
    from singa_core.plugin_host.host import get_host
    from singa_core.running.job import prepare_job
    from singa_core.running.reporting import Reporter

    if not FACTS_PRINTED:
        print(machine_facts(args.threads))
    stores = mnist_stores()
    host = get_host()
    set_blas_threads(args.threads)
    for name in ("job.conf", "conv.conf"):
        conf = REPO / "examples" / "mnist" / name

        def prepared(ws: str, conf=conf):
            cfg = load_job(
                conf,
                [
                    f"neuralnet.layer[0].store_conf.path={stores / 'train_data.bin'}",
                    f"neuralnet.layer[1].store_conf.path={stores / 'test_data.bin'}",
                    f"cluster.workspace={ws}",
                    f"num_openblas_threads={args.threads}",
                    "test_steps=0",
                    "disp_freq=0",
                    "checkpoint_freq=0",
                ],
            )
            return prepare_job(cfg, host, seed=0)

        tables, trained, fast_t, fast_r = [], [], [], []
        for r in range(args.rounds):
            t = time_training_step(prepared(tempfile.gettempdir()), args.steps, args.warmup)
            tables.append(t.as_dict()["step_ms_median"])
            fast_t.append(1000 * min(t.step))
            tmp = Path(tempfile.mkdtemp(prefix="singa-bench-time-"))
            p = prepared(str(tmp / "ws"))
            p.job.train_steps = args.steps + args.warmup
            reporter = Reporter(quiet=True, live=False)
            host.get("engine", "inprocess")(p, reporter).train()
            shutil.rmtree(tmp)  # the final checkpoint
            trained.append(1000 * statistics.median(reporter._step_times[args.warmup :]))
            fast_r.append(1000 * min(reporter._step_times[args.warmup :]))
            print(
                f"  {name} round {r}: table {tables[-1]:.2f} ms, trained step "
                f"{trained[-1]:.2f} ms ({tables[-1] / trained[-1]:.3f}x)"
            )
        a, b = statistics.median(tables), statistics.median(trained)
        print(
            f"{name}: table sum {a:.2f} ms/step vs trained {b:.2f} ms/step: {a / b:.3f}x (medians)"
        )
        a, b = min(fast_t), min(fast_r)
        print(
            f"{name}: table sum {a:.2f} ms/step vs trained {b:.2f} ms/step: {a / b:.3f}x (fastest)"
        )


if __name__ == "__main__":
    main()
