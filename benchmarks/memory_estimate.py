"""The dry-run's memory estimate against the measured peak, for the three examples.

    python benchmarks/memory_estimate.py [--net mlp|lenet|cifar10|all] [--steps 20]

For each example (the runs of ``peak_memory.py``: ``--steps`` training steps, one test pass
of 2 batches, the final checkpoint) it prints:

* the estimate ``singa train --dry-run`` gives (the total of its memory table: data,
  gradients, Params, updater state, the scratch buffers layers declare, the store pages a
  reader keeps mapped, the checkpoint write and, when the net's pooling runs numba's
  kernels, numba's JIT compiler);
* the run's peak resident set (VmHWM, read by the process as it exits), and the same for a
  base process that imports what the run imports and builds nothing: the very modules the
  run without numba had loaded when it ended (Python, numpy, scipy, the plugins, and what
  loads on the way: typer's pydantic, numpy.random, tensorboardX), each imported in the
  same order and nothing else (an import the run did not make fails, as it did there),
  plus ``import numba`` for a run with numba. That is the part of the peak no job.conf
  controls. What numba loads when the kernels are first called (its compiler, LLVM and the
  modules they import) is not in the base: the estimate charges it;
* the peak minus that base, which is what the estimate is about, and the ratio.

The run is also made with numba hidden (``SINGA_TEST_WITHOUT=numba``, the pure-numpy
path), where its compiler's memory is not in the peak. With numba it also measures the
compiler alone: a base process (with numba) that calls, once, on small arrays, each kernel
the net's pooling layers use (loaded from numba's cache, as in the run); its peak minus the
base is the line ``singa_builtins.layers._pool_kernels.JIT_BYTES`` charges. The target is an
estimate within 15% of the measured part of the peak.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile

from _common import REPO, load_average, print_machine_facts
from peak_memory import NETS, run_reporting, singa_command

# when the process exits, write its VmHWM (kB) and the names of the modules it has loaded,
# in the order they were loaded, as JSON to the file descriptor given as the first argument
_REPORT = """
import atexit, json, os, sys
def _report():
    with open('/proc/self/status') as f:
        kb = [line.split()[1] for line in f if line.startswith('VmHWM:')][0]
    os.write(fd, json.dumps({'kb': int(kb), 'modules': list(sys.modules)}).encode())
fd = int(sys.argv.pop(1))
atexit.register(_report)
"""

# run the module named first as __main__, with the arguments after it
_RUN_MODULE = """
import runpy
module = sys.argv.pop(1)
sys.argv[0] = module
runpy.run_module(module, run_name='__main__', alter_sys=True)
"""

# the base: import numba first when asked (everything `import numba` loads), then the run's
# modules in the run's order, refusing every other import, as the run never made it
_BASE = """
import importlib, json, sys
for name in json.loads(sys.argv[1]):
    importlib.import_module(name)
allowed = set(json.loads(sys.argv[2])) | set(sys.modules)

class OnlyTheRunsModules:
    def find_spec(self, name, path=None, target=None):
        if name not in allowed:
            raise ModuleNotFoundError(f"the run did not import {name}", name=name)
        return None

only = OnlyTheRunsModules()
sys.meta_path.insert(0, only)
for name in json.loads(sys.argv[2]):
    if name not in sys.modules and name != '__main__':
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - as the run: a module it had as a stand-in
            pass
sys.meta_path.remove(only)
"""

# numba's JIT alone: after the base, each kernel the net's pooling uses, once, small arrays
_JIT = """
import numpy as np
from singa_builtins.layers._pool_kernels import kernels
k = kernels()
x = np.zeros((2, 4, 4, 8), np.float32)
out = np.zeros((2, 2, 2, 8), np.float32)
arg = np.zeros(out.shape, np.uint8)
for method in sys.argv[3].split(','):
    if method == 'max':
        k.max_forward(x, 2, 2, 2, 2, out, arg, True)
        k.max_backward(out, arg, 2, 2, 2, 2, True, True, x)
    else:
        k.avg_forward(x, 2, 2, 2, 2, np.float32(0.25), out)
        k.avg_backward(out, 2, 2, 2, 2, np.float32(0.25), x)
"""

#: the pooling methods of each example's net (the kernels its layers call)
POOLING = {"lenet": "max", "cifar10": "max,avg"}


def run_peak(args: list[str], env: dict) -> tuple[float, list[str]]:
    """Run ``python -m MODULE ARGS...`` or ``python -c CODE ARGS...`` (``args``) to its end:
    its peak resident set in MiB and the modules it had loaded."""
    code = _REPORT + (_RUN_MODULE if args[0] == "-m" else args[1])
    rest = args[1 if args[0] == "-m" else 2 :]
    found = json.loads(run_reporting(code, rest, env, " ".join(args[:4])))
    return found["kb"] / 1024.0, found["modules"]


def base_mib(env: dict, modules: list[str], numba: bool, jit: str = "") -> float:
    """Peak of a process importing ``modules`` (the run's) and, with ``numba``, numba;
    with ``jit`` (pooling methods), also calling those kernels once."""
    first = json.dumps(["numba"] if numba else [])
    code = _BASE + (_JIT if jit else "")
    return run_peak(["-c", code, first, json.dumps(modules), jit], env)[0]


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
    notes = []
    for net in nets:
        numba_run = have_numba and net in POOLING
        rows = []
        for label, run_env in [("no", hide), *([("yes", env)] if numba_run else [])]:
            with tempfile.TemporaryDirectory() as ws:
                est = estimate_mib(net, args.steps, ws, run_env)
            with tempfile.TemporaryDirectory() as ws:
                peak, modules = run_peak(["-m", *singa_command(net, args.steps, 1, ws)], run_env)
            if label == "no":
                plain = modules  # the base's modules: the run's, numba hidden
            base = base_mib(run_env, plain, numba=label == "yes")
            rows.append((label, est, peak, base))
            if label == "yes":
                jit = base_mib(run_env, plain, numba=True, jit=POOLING[net]) - base
                notes.append(
                    f"{NETS[net]}: numba's JIT compiler alone ({POOLING[net]} pooling "
                    f"kernels, from numba's cache): {jit:.1f} MiB"
                )
        for label, est, peak, base in reversed(rows):  # with numba first
            own = peak - base
            print(
                f"{NETS[net]:<32} {label:>6} {est:>8.1f}M {peak:>7.1f}M {base:>7.1f}M "
                f"{own:>9.1f}M {est / own:>6.2f}",
                flush=True,
            )
    for note in notes:
        print(note)
    print(f"load average at end: {load_average()}")


if __name__ == "__main__":
    main()
