"""The dry-run's memory estimate against the measured peak, for the three examples.

    python benchmarks/memory_estimate.py [--net mlp|lenet|cifar10|all] [--steps 20]

For each example (the runs of ``peak_memory.py``: ``--steps`` training steps, one test pass
of 2 batches, the final checkpoint) it prints:

* the estimate ``singa train --dry-run`` gives (the total of its memory table: data,
  gradients, Params, updater state, the large scratch buffers layers declare);
* the run's peak resident set (VmHWM, read by the process as it exits), and the same for a
  process that only imports what the run imports (Python, numpy, scipy, the plugins; numba
  for the convolution nets when it is installed, whose JIT compiler the run then uses) —
  the part of the peak no job.conf controls;
* the peak minus that base, which is what the estimate is about, and the ratio.

The run is also made with numba hidden (``SINGA_TEST_WITHOUT=numba``, the pure-numpy
path), where its compiler's memory is not in the peak. The target is an estimate within
15% of the measured part of the peak.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import subprocess
import sys
import tempfile

from _common import REPO, load_average, print_machine_facts
from peak_memory import NETS, peak_mib, singa_command

_BASE = (
    "import numpy, scipy\n"
    "from singa_core.plugin_host.host import get_host\n"
    "import singa_core.commands.cli\n"
    "get_host()\n"
)


def base_mib(env: dict, numba: bool) -> float:
    """Peak resident set of a process importing what a run imports, building nothing."""
    with tempfile.TemporaryDirectory() as tmp:
        mod = os.path.join(tmp, "singa_base_probe.py")
        with open(mod, "w") as f:
            f.write(("import numba\n" if numba else "") + _BASE)
        return peak_mib(["singa_base_probe"], {**env, "PYTHONPATH": _path(env, tmp)})


def _path(env: dict, *extra: str) -> str:
    return os.pathsep.join([*extra, env.get("PYTHONPATH", "")]).strip(os.pathsep)


def estimate_mib(net: str, steps: int, ws: str, env: dict) -> float:
    cmd = singa_command(net, steps, 1, ws)
    res = subprocess.run(
        [sys.executable, "-m", *cmd, "--dry-run"], env=env, capture_output=True, text=True
    )
    found = re.search(r"^  total [0-9.]+ \w+ \(([0-9,]+) bytes\)", res.stdout, re.M)
    if res.returncode != 0 or not found:
        raise SystemExit(f"dry-run of {net} failed:\n{res.stdout[-2000:]}{res.stderr[-2000:]}")
    return int(found.group(1).replace(",", "")) / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--net", choices=[*NETS, "all"], default="all")
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    print_machine_facts(1)
    print(f"load average at start: {load_average()}")
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    hide = {
        **env,
        "PYTHONPATH": _path(env, str(REPO / "tests" / "without_extras")),
        "SINGA_TEST_WITHOUT": "numba",
    }
    have_numba = importlib.util.find_spec("numba") is not None
    nets = list(NETS) if args.net == "all" else [args.net]
    cols = ("numba", "estimate", "peak", "base", "peak-base", "ratio")
    widths = (6, 9, 8, 8, 10, 6)
    print(f"{'net':<32} " + " ".join(f"{c:>{w}}" for c, w in zip(cols, widths, strict=True)))
    for net in nets:
        with tempfile.TemporaryDirectory() as ws:
            est = estimate_mib(net, args.steps, ws, env)
        runs = [("no", hide, False)]
        if have_numba and net != "mlp":
            runs.insert(0, ("yes", env, True))
        for label, run_env, numba in runs:
            with tempfile.TemporaryDirectory() as ws:
                peak = peak_mib(singa_command(net, args.steps, 1, ws), run_env)
            base = base_mib(run_env, numba)
            own = peak - base
            print(
                f"{NETS[net]:<32} {label:>6} {est:>8.1f}M {peak:>7.1f}M {base:>7.1f}M "
                f"{own:>9.1f}M {est / own:>6.2f}"
            )
    print(f"load average at end: {load_average()}")


if __name__ == "__main__":
    main()
