"""Cost of the numeric guard on the MNIST MLP (SINGA's examples/mnist/job.conf, batch 64).

    python benchmarks/numeric_guard.py [--rounds 10] [--steps 20] [--threads 2]

The training loop checks after every step that the learning rate, the layers' metrics,
every gradient and every Param value are finite (singa_core.running.numeric.NumericGuard). This
times one training step of the in-process engine without and with that check, in
alternating rounds, and the check alone; prints the medians, the difference per step and
its share of a step. Machine facts (CPU count, BLAS threads) are printed first.
"""

from __future__ import annotations

import os
import platform
import time

from _common import REPO, interleaved, median_ms, mnist_stores, singa_train_step, standard_args


def main() -> None:
    args = standard_args(__doc__.splitlines()[0], rounds=10, steps=20, warmup=10)
    stores = mnist_stores()
    overrides = [
        f"neuralnet.layer[0].store_conf.path={stores / 'train_data.bin'}",
        f"neuralnet.layer[1].store_conf.path={stores / 'test_data.bin'}",
    ]
    step = singa_train_step(REPO / "examples" / "mnist" / "job.conf", overrides, args.threads)
    # the closure's net: build the guard exactly as the TrainingLoop does
    from singa_core.running.numeric import NumericGuard

    net = next(c.cell_contents for c in step.__closure__ if hasattr(c.cell_contents, "layers"))
    guard = NumericGuard(net)
    values = sum(p.size for p in net.owner_params)

    def guarded(s):
        step(s)
        guard.check(s)

    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPU(s), "
        f"{args.threads} BLAS thread(s); net: {values:,} Param values (and as many gradients)"
    )
    times = interleaved(
        {"without guard": step, "with guard": guarded}, args.rounds, args.steps, args.warmup
    )
    for name, t in times.items():
        print(f"{name:14s} median {median_ms(t):7.2f} ms/step")
    checks = []
    for i in range(200):
        t0 = time.perf_counter()
        guard.check(i)
        checks.append(time.perf_counter() - t0)
    alone = median_ms(checks)
    base = median_ms(times["without guard"])
    diff = median_ms(times["with guard"]) - base
    print(f"guard alone:   median {alone:7.3f} ms per check ({100 * alone / base:.2f}% of a step)")
    print(f"difference:    {diff:+.2f} ms/step ({100 * diff / base:+.1f}%)")


if __name__ == "__main__":
    main()
