"""The Ray engine across two emulated machines with shaped links: ms/step against the bytes
that cross between them.

    python benchmarks/ray_network.py [--quick] [--models mlp cifar10]
        [--rates unshaped 10gbit 1gbit 100mbit] [--placements ...] [--steps N]

Two machines, each with its own network, PID and mount namespaces, linked by a bridge in a
namespace of its own (tests/engines/emulated_machines.py; nothing is added to the root
network namespace; needs root, unshare, nsenter, ip and tc), made into a Ray cluster by the
README's "## Two or more machines" block (token authentication on). Machine 1's link is
shaped with tbf (both directions) to each rate in turn. For every model, rate and
``--placement`` value ``singa train --help`` names, one ``singa train`` run from the head:

* mlp: SINGA's MNIST MLP as Downpour (examples/frameworks/downpour.conf: 2 worker groups
  of 2 workers, 1 server group of 2 servers, server_worker_separate); 12 M parameters;
* cifar10: examples/cifar10/job.conf with the same cluster section (a derived job.conf
  written to a temp folder); 0.09 M parameters.

Columns: singa's own ms/step (the closing line's mean over the training steps, start-up
excluded; the steps of group 0's display worker: Downpour's groups run asynchronously, so
with ``group`` or ``pack`` placing group 0 beside its servers the other group's wait on the
link does not show in it); job ms: the driver's "ray: all N worker groups trained ..."
note, the start gate to the last group's end per step (what the slowest group, and so the
job, takes); MB/step that crossed between the nodes (the closing ``ray:``
note: gradients + values + syncs, divided by the steps); the wire-time model bytes/rate in
ms; the bytes machine 1's link carried per step in and out (its interface counters:
everything Ray sent, not only parameters) and the wire time of the busier direction (tbf
limits each direction to the rate: a gradient goes one way and its value comes back the
other). The shared /dev/shm is checked after every run: no ``singa-ray-*`` name may be
left.

This box's cores are shared by both machines (each one's Ray sees all of them), so a
"machine" computes only as fast as the box can run both; the numbers say what the links
cost, not what two real machines would compute.
"""

from __future__ import annotations

import argparse
import re
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO, cifar10_stores, emulated_machines_recipe, load_average, mnist_stores

sys.path.insert(0, str(REPO))
from tests.engines.emulated_machines import (  # noqa: E402
    EmulatedCluster,
    crossed_mb,
    node_ids,
    placements,
    rate_bits,
    ray_segments,
    segments_left,
    start_ray,
    step_ms,
)

HEAD, OTHER = 0, 1
RATES = ("unshaped", "10gbit", "1gbit", "100mbit")
CLUSTER = """cluster {
  nworker_groups: 2
  nserver_groups: 1
  nworkers_per_group: 2
  nservers_per_group: 2
  server_worker_separate: true
  workspace: "unused"
}
"""


def mlp_job(tmp: Path) -> tuple[Path, list[str]]:
    stores = mnist_stores()
    return REPO / "examples" / "frameworks" / "downpour.conf", [
        f"neuralnet.layer[0].store_conf.path={stores / 'train_data.bin'}",
        f"neuralnet.layer[1].store_conf.path={stores / 'test_data.bin'}",
    ]


def cifar10_job(tmp: Path) -> tuple[Path, list[str]]:
    """examples/cifar10/job.conf with Downpour's cluster section, written to ``tmp``."""
    stores = cifar10_stores()
    text = (REPO / "examples" / "cifar10" / "job.conf").read_text()
    text, n = re.subn(r"(?ms)^cluster \{.*?^\}\n?", CLUSTER, text)
    if n != 1:
        raise SystemExit("examples/cifar10/job.conf: expected one top-level cluster { } section")
    conf = tmp / "cifar10-downpour.conf"
    conf.write_text(text)
    overrides = []
    for i in (0, 1):
        name = ("train_data.bin", "test_data.bin")[i]
        overrides += [
            f"neuralnet.layer[{i}].store_conf.path={stores / name}",
            f"neuralnet.layer[{i}].store_conf.mean_file={stores / 'image_mean.bin'}",
        ]
    return conf, overrides


MODELS = {"mlp": mlp_job, "cifar10": cifar10_job}


def steps_for(model: str, rate: str, args) -> int:
    if args.steps:
        return args.steps
    slow = rate != "unshaped" and rate_bits(rate) < 1e9
    if args.quick:
        return 3 if slow else 5
    return {"mlp": 5 if slow else 20, "cifar10": 10 if slow else 20}[model]


def run_one(cluster, recipe, conf: Path, overrides: list[str], steps: int, placement: str,
            tmp: Path) -> dict:  # fmt: skip
    ws = Path(tempfile.mkdtemp(prefix="ws-", dir=tmp))
    line = recipe.fill(recipe.train, cluster.address(HEAD)).split()
    # the README's line with this job in place of its job.conf
    conf_at = next(i for i, a in enumerate(line) if a.endswith(".conf"))
    line[conf_at] = str(conf)
    line += ["--placement", placement, "-q"]
    for o in [*overrides, f"train_steps={steps}", "test_steps=0", "checkpoint_freq=0",
              f"cluster.workspace={ws}"]:  # fmt: skip
        line += ["-o", o]
    before = ray_segments()
    rx0, tx0 = cluster.link_bytes(OTHER)
    t0 = time.monotonic()
    res = cluster.run(HEAD, shlex.join(line), env=recipe.env, timeout=3600)
    wall = time.monotonic() - t0
    rx1, tx1 = cluster.link_bytes(OTHER)
    out = res.stdout + res.stderr
    left = segments_left(before, node_ids(out))
    shutil.rmtree(ws, ignore_errors=True)
    found = step_ms(out)
    if res.returncode != 0 or found is None:
        tail = "\n".join(res.stderr.splitlines()[-15:])
        return {"error": f"exit {res.returncode}: {tail}", "wall": wall, "left": left}
    n, ms = found
    slowest = SLOWEST.search(out)
    return {
        "ms": ms,
        "job_ms": float(slowest.group(1)) if slowest else ms,
        "mb": (crossed_mb(out) or 0.0) / n,
        "in": (rx1 - rx0) / 1e6 / n,
        "out": (tx1 - tx0) / 1e6 / n,
        "steps": n,
        "wall": wall,
        "left": left,
    }


SLOWEST = re.compile(r"\(([\d.]+) ms per step of the slowest group")

HEADER = (
    f"{'model':8s} {'rate':9s} {'placement':9s} {'steps':>5s} {'ms/step':>9s} {'job ms':>9s} "
    f"{'MB/step':>8s} {'bytes/rate':>10s} {'link in/out MB/step':>20s} {'busier dir':>10s}"
)


def row(model, rate, placement, r) -> str:
    head = f"{model:8s} {rate:9s} {placement:9s}"
    if "error" in r:
        return f"{head} failed after {r['wall']:.0f} s: {r['error']}"
    if rate == "unshaped":
        wire, busier = "-", "-"
    else:
        bits = rate_bits(rate)
        wire = f"{r['mb'] * 8e6 / bits * 1e3:.0f} ms"
        busier = f"{max(r['in'], r['out']) * 8e6 / bits * 1e3:.0f} ms"
    link = f"{r['in']:.1f} / {r['out']:.1f}"
    text = (
        f"{head} {r['steps']:5d} {r['ms']:9.1f} {r['job_ms']:9.1f} {r['mb']:8.1f} {wire:>10s} "
        f"{link:>20s} "
        f"{busier:>10s}"
    )
    if r["left"]:
        text += f"  LEFT IN /dev/shm: {sorted(r['left'])}"
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    quick = "a short run: 5 steps (3 below 1 Gbit/s), unshaped and 1gbit only"
    ap.add_argument("--quick", action="store_true", help=quick)
    ap.add_argument("--models", nargs="+", choices=sorted(MODELS), default=["mlp", "cifar10"])
    ap.add_argument("--rates", nargs="+", default=None,
                    help=f"unshaped and/or tbf rates (default: {' '.join(RATES)})")  # fmt: skip
    ap.add_argument("--placements", nargs="+", default=None,
                    help="default: every value of singa train --placement")  # fmt: skip
    ap.add_argument("--steps", type=int, default=0, help="steps of every run (default: by rate)")
    args = ap.parse_args()
    rates = args.rates or (["unshaped", "1gbit"] if args.quick else list(RATES))
    for r in rates:
        if r != "unshaped":
            rate_bits(r)  # a bad rate is an error before anything starts
    known = placements()
    chosen = args.placements or known
    bad = [p for p in chosen if p not in known]
    if bad:
        raise SystemExit(f"unknown placement(s) {bad}: singa train --placement takes {known}")

    recipe = emulated_machines_recipe()
    tmp = Path(tempfile.mkdtemp(prefix="singa-bench-ray-network-"))
    results = []
    try:
        jobs = {m: MODELS[m](tmp) for m in args.models}
        with EmulatedCluster(2) as cluster:
            t0 = time.monotonic()
            start_ray(cluster, recipe, head=HEAD, others=(OTHER,))
            print(
                f"2 emulated machines ({cluster.address(HEAD)} head, {cluster.address(OTHER)}),"
                f" Ray by the README's block in {time.monotonic() - t0:.1f} s; each machine's "
                f"Ray sees all of this box's CPUs; machine {OTHER}'s link shaped per row\n"
            )
            print(HEADER, flush=True)
            for rate in rates:
                cluster.shape(OTHER, None if rate == "unshaped" else rate)
                for model in args.models:
                    conf, overrides = jobs[model]
                    for placement in chosen:
                        steps = steps_for(model, rate, args)
                        r = run_one(cluster, recipe, conf, overrides, steps, placement, tmp)
                        results.append((model, rate, placement, r))
                        print(row(model, rate, placement, r), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n({load_average()} at the end)")
    if any("error" in r or r["left"] for *_, r in results):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
