"""``singa tune`` on the real MNIST: what a study costs and what early stopping saves.

    python benchmarks/tune.py [--part overhead|early|parallel|all] [--trials 24] [--steps 600]

* **overhead**: one trial inside a study (``singa tune``, parallel 1, the trial's values
  fixed by one-value choices) against the same job alone (``singa train`` with the same
  ``-o``, seed and threads), in alternating rounds; the start-up of a ``singa`` process
  (``singa train`` of 1 step) printed beside them. Aim: at most 5% beyond start-up.
* **early**: the MNIST MLP (``examples/mnist/job.conf``) over base learning rate, momentum
  and weight decay (``examples/mnist/tune.conf``: 24 trials of 600 steps, TPE), once with
  its early stopping (ASHA) and once with ``rule: NONE`` (the full budget), the same seed
  (``--full BEST STEPS SECONDS`` reuses a full-budget run measured before): the
  best test accuracy of each and the training steps each took (a stopped trial counts the
  steps it trained). Aim: within 0.005 of the full budget's best at <= 40% of its steps.
  The step counts and accuracies do not depend on the machine's load; the times do.
* **parallel**: 4 trials of one configuration two at a time (1 BLAS thread each) against
  one after the other (all the CPUs each), on this machine.

Prints the machine facts and the load average first, and again before each part.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO, load_average, mnist_stores, print_machine_facts

CONF = REPO / "examples" / "mnist" / "job.conf"
SPACE = REPO / "examples" / "mnist" / "tune.conf"
FIXED = {"updater.learning_rate.base_lr": "0.01", "updater.momentum": "0.9"}


def _stores_args(stores: Path) -> list[str]:
    return [
        "-o",
        f"neuralnet.layer[0].store_conf.path={stores / 'train_data.bin'}",
        "-o",
        f"neuralnet.layer[1].store_conf.path={stores / 'test_data.bin'}",
    ]


def _singa(*args, env=None) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    res = subprocess.run(
        [sys.executable, "-m", "singa_core.commands.cli", *map(str, args)],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        raise SystemExit(f"singa {' '.join(map(str, args))} failed:\n{res.stderr[-3000:]}")
    return wall, res


def _fixed_space(folder: Path, steps: int, trials: int) -> Path:
    lines = [f'param {{ field: "{f}" choice {{ value: "{v}" }} }}' for f, v in FIXED.items()]
    lines += [
        f"budget {{ trials: {trials} train_steps: {steps} }}",
        "early_stopping { rule: NONE }",
    ]
    path = folder / "fixed.conf"
    path.write_text("\n".join(lines) + "\n")
    return path


def _show(study: Path) -> dict:
    _, res = _singa("tune", "--show", study, "--json")
    return json.loads(res.stdout)


def overhead(stores: Path, steps: int, rounds: int = 3) -> None:
    threads = os.cpu_count() or 1
    env = {"OPENBLAS_NUM_THREADS": str(threads), "OMP_NUM_THREADS": str(threads)}
    tmp = Path(tempfile.mkdtemp(prefix="singa-tune-bench-"))
    space = _fixed_space(tmp, steps, 1)
    sets = [x for f, v in FIXED.items() for x in ("-o", f"{f}={v}")]
    alone, inside, start = [], [], []
    for k in range(rounds):
        wall, _ = _singa(
            "train",
            CONF,
            *_stores_args(stores),
            "-o",
            "train_steps=1",
            "--workspace",
            tmp / f"s{k}",
            "-q",
            "--no-tensorboard",
            env=env,
        )
        start.append(wall)
        wall, _ = _singa(
            "train",
            CONF,
            *_stores_args(stores),
            *sets,
            "-o",
            f"train_steps={steps}",
            "--seed",
            "1",
            "--workspace",
            tmp / f"a{k}",
            "-q",
            "--no-tensorboard",
            env=env,
        )
        alone.append(wall)
        study = tmp / f"t{k}"
        wall, _ = _singa(
            "tune",
            CONF,
            space,
            "--study",
            study,
            "--parallel",
            "1",
            "--trial-threads",
            threads,
            "--seed",
            "1",
            *_stores_args(stores),
        )
        trial = _show(study)["trials"][0]
        inside.append((wall, trial["seconds"]))
    med = sorted(alone)[len(alone) // 2]
    trial_med = sorted(s for _, s in inside)[len(inside) // 2]
    study_med = sorted(w for w, _ in inside)[len(inside) // 2]
    st = sorted(start)[len(start) // 2]
    print(
        f"overhead ({steps} steps, {threads} BLAS threads, {rounds} rounds, medians): "
        f"the job alone {med:.2f} s; the trial inside a study {trial_med:.2f} s "
        f"({(trial_med / med - 1) * 100:+.1f}%); the whole `singa tune` {study_med:.2f} s "
        f"({study_med - med:+.2f} s: the tuner's start-up, Optuna, checks, best.conf); "
        f"a singa process's start-up {st:.2f} s"
    )
    shutil.rmtree(tmp, ignore_errors=True)


def early(stores: Path, trials: int, seed: int = 1, full: tuple | None = None) -> None:
    """``full``: (best, steps, seconds) of a full-budget search measured before with the
    same space, trials and seed (its figures do not depend on the stopping rule), to run
    only the search with early stopping."""
    import re

    tmp = Path(tempfile.mkdtemp(prefix="singa-tune-bench-"))
    full_space = tmp / "full.conf"
    text = SPACE.read_text()
    full_space.write_text(
        re.sub(r"early_stopping \{ rule: \w+", "early_stopping { rule: NONE", text)
    )
    rule = re.search(r"early_stopping \{ rule: (\w+)", text).group(1)
    out = {}
    if full is not None:
        out["full budget"] = full
        print(f"  full budget (measured before, same seed): best {full[0]:.4f}, "
              f"{full[1]:,} steps, {full[2]:.0f} s")  # fmt: skip
    searches = [("early stopping", SPACE)] + ([] if full else [("full budget", full_space)])
    for name, space in searches:
        print(f"  {name}: {load_average()}", flush=True)
        wall, _ = _singa(
            "tune",
            CONF,
            space,
            "--study",
            tmp / name.split()[0],
            "--trials",
            trials,
            "--seed",
            seed,
            *_stores_args(stores),
        )
        doc = _show(tmp / name.split()[0])
        done = [t for t in doc["trials"] if t["state"] == "complete"]
        steps = sum(int(t["step"] or 0) for t in doc["trials"])
        best = max(t["value"] for t in done)
        out[name] = (best, steps, wall)
        print(
            f"  {name}: best test accuracy {best:.4f} over {len(doc['trials'])} trials "
            f"({len(done)} complete, {sum(t['state'] == 'pruned' for t in doc['trials'])} "
            f"stopped early), {steps:,} training steps, {wall:.0f} s",
            flush=True,
        )
    (b1, s1, w1), (b0, s0, w0) = out["early stopping"], out["full budget"]
    print(
        f"early stopping ({rule}): best {b1:.4f} vs {b0:.4f} "
        f"(difference {b1 - b0:+.4f}; aim >= -0.005) "
        f"at {s1 / s0 * 100:.0f}% of the steps (aim <= 40%) and {w1 / w0 * 100:.0f}% of the "
        f"wall time"
    )
    shutil.rmtree(tmp, ignore_errors=True)


def parallel(stores: Path, steps: int, trials: int = 4) -> None:
    cpus = os.cpu_count() or 1
    tmp = Path(tempfile.mkdtemp(prefix="singa-tune-bench-"))
    space = _fixed_space(tmp, steps, trials)
    walls = {}
    for name, par, threads in (("2 at a time", 2, max(1, cpus // 2)), ("serial", 1, cpus)):
        wall, _ = _singa(
            "tune",
            CONF,
            space,
            "--study",
            tmp / name.split()[0],
            "--parallel",
            par,
            "--trial-threads",
            threads,
            "--seed",
            "1",
            *_stores_args(stores),
        )
        walls[name] = wall
        print(
            f"  {trials} trials {name} ({threads} BLAS thread(s) each): {wall:.1f} s "
            f"({load_average()})",
            flush=True,
        )
    print(
        f"parallel: 2 at a time took {walls['2 at a time'] / walls['serial'] * 100:.0f}% of "
        "the serial wall time"
    )
    shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", choices=("overhead", "early", "parallel", "all"), default="all")
    ap.add_argument("--trials", type=int, default=24)
    ap.add_argument("--steps", type=int, default=300, help="steps of the overhead/parallel job")
    ap.add_argument("--full", nargs=3, type=float, metavar=("BEST", "STEPS", "SECONDS"),
                    help="--part early: the full-budget search's figures from an earlier run "
                    "of the same space, trials and seed (skip running it again)")  # fmt: skip
    args = ap.parse_args()
    import optuna

    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import optuna"], check=True)
    print(
        f"optuna {optuna.__version__}; `python -c 'import optuna'` {time.perf_counter() - t0:.2f} s"
    )
    print_machine_facts(os.cpu_count() or 1)
    stores = mnist_stores()
    for part in ("overhead", "early", "parallel"):
        if args.part in (part, "all"):
            print(f"{part}: {load_average()}", flush=True)
            if part == "overhead":
                overhead(stores, args.steps)
            elif part == "early":
                early(stores, args.trials, full=tuple(args.full) if args.full else None)
            else:
                parallel(stores, args.steps)


if __name__ == "__main__":
    main()
