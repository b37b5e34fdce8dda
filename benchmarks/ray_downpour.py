"""Downpour 2x2 on two emulated machines with the default placement: bytes per step between
them and the test accuracy it reaches.

    python benchmarks/ray_downpour.py [--steps 300] [--placement group] [--rate 1gbit]

Two machines (tests/engines/emulated_machines.py: network, PID and mount namespaces on a
bridge in a namespace of its own; nothing in the root network namespace; needs root),
made into a Ray cluster by the README's "## Two or more machines" block (token
authentication on). The head runs the README's own ``singa train`` line
(examples/frameworks/downpour.conf: SINGA's MNIST MLP, 2 worker groups of 2 workers, 1
server group of 2 servers) for ``--steps`` steps with the given placement (default: the
engine's default), optionally with the other machine's link shaped by tbf; then ``singa
test`` on all 10,000 test images. Printed: where each process ran, the MB per step that
crossed (singa's closing note) against the placement's model, the dry-run's figures for
the other placements, ms/step of group 0 and of the slowest group, and the accuracy.
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

from _common import REPO, emulated_machines_recipe, load_average, mnist_stores

sys.path.insert(0, str(REPO))
from tests.engines.emulated_machines import (  # noqa: E402
    EmulatedCluster,
    node_ids,
    ray_segments,
    segments_left,
    start_ray,
)

HEAD, OTHER = 0, 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--placement", default=None, help="default: the engine's default")
    ap.add_argument("--rate", default=None, help="tbf rate of the other machine's link")
    args = ap.parse_args()
    recipe = emulated_machines_recipe()
    stores = mnist_stores()
    tmp = Path(tempfile.mkdtemp(prefix="singa-bench-downpour-"))
    failed = False
    try:
        with EmulatedCluster(2) as cluster:
            start_ray(cluster, recipe, head=HEAD, others=(OTHER,))
            if args.rate:
                cluster.shape(OTHER, args.rate)
            line = recipe.fill(recipe.train, cluster.address(HEAD)).split()
            overrides = [
                f"neuralnet.layer[0].store_conf.path={stores / 'train_data.bin'}",
                f"neuralnet.layer[1].store_conf.path={stores / 'test_data.bin'}",
                f"train_steps={args.steps}", "test_freq=0", "checkpoint_freq=0",
                f"cluster.workspace={tmp / 'ws'}",
            ]  # fmt: skip
            extra = [a for o in overrides for a in ("-o", o)]
            if args.placement:
                extra += ["--placement", args.placement]
            dry = cluster.run(HEAD, shlex.join([*line, *extra, "--dry-run"]), env=recipe.env,
                              timeout=600)  # fmt: skip
            for text in dry.stdout.splitlines():
                if "between nodes" in text or "other placements" in text or " -> node " in text:
                    print(text.strip())
            before = ray_segments()
            t0 = time.monotonic()
            res = cluster.run(HEAD, shlex.join([*line, *extra, "-q"]), env=recipe.env,
                              timeout=7200)  # fmt: skip
            wall = time.monotonic() - t0
            out = res.stdout + res.stderr
            for text in out.splitlines():
                if text.startswith(("ray: all", "ray: parameters", "finished at")):
                    print(text)
            left = segments_left(before, node_ids(out))
            print(f"exit {res.returncode} after {wall:.0f} s; segments left: {sorted(left)}")
            failed = res.returncode != 0 or bool(left)
            if res.returncode == 0:
                test = cluster.run(
                    HEAD,
                    shlex.join([sys.executable, "-m", "singa_core.commands.cli", "test",
                                str(REPO / "examples" / "frameworks" / "downpour.conf"),
                                "--steps", "100", *extra[: 2 * len(overrides)]]),
                    env=recipe.env, timeout=600,
                )  # fmt: skip
                m = re.search(r"accuracy = ([\d.]+)", test.stdout)
                print(f"test accuracy on 10,000 images: {m.group(1) if m else test.stderr[-500:]}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"({load_average()} at the end)")
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
