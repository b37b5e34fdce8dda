"""Peak resident memory of whole training runs: singa vs PyTorch CPU, same nets.

    python benchmarks/peak_memory.py [--net mlp|lenet|cifar10|all] [--steps 40] [--threads 2]

Each run is a fresh process, measured by the kernel: its ``VmHWM`` (the largest resident
set the process ever had, shared libraries and memory-mapped data included), read by the
process itself as it exits. (``wait4``'s ``ru_maxrss`` would not do: on Linux a child
inherits the high-water mark of the parent it was forked from, across exec.)

* singa: the real ``singa train JOB.conf`` of examples/mnist/job.conf (MLP),
  examples/mnist/conv.conf (LeNet) and examples/cifar10/job.conf, for ``--steps`` training
  steps with one test pass of 2 batches half-way and the final checkpoint — everything a
  user's run holds (train and test nets, the parameters, gradients, updater history, the
  memory-mapped store pages it read);
* PyTorch: the same models as ``mnist_mlp.py`` and ``conv_nets.py`` (torch.optim.SGD with
  the same momentum, 16 preloaded batches of the same size), ``--steps`` training steps.
  That counts less for PyTorch than for singa (no test pass, no checkpoint, no data
  reader), so the ratio errs against singa.

With tensorboardX installed, ``singa train`` writes TensorBoard event files by default,
and tensorboardX imports PyTorch when it is installed (about 200 MiB resident): the singa
run is then also measured with ``--no-tensorboard``, which is what a machine without
PyTorch gets.

Prints the peaks in MiB and the ratios; the project's limit is 1.5x.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import REPO, cifar10_stores, load_average, mnist_stores, print_machine_facts

HERE = Path(__file__).resolve().parent


def singa_command(net: str, steps: int, threads: int, ws: str, *extra: str) -> list[str]:
    if net == "cifar10":
        stores = cifar10_stores()
        conf = REPO / "examples" / "cifar10" / "job.conf"
        mean = stores / "image_mean.bin"
        data = [
            f"neuralnet.layer[0].store_conf.path={stores / 'train_data.bin'}",
            f"neuralnet.layer[0].store_conf.mean_file={mean}",
            f"neuralnet.layer[1].store_conf.path={stores / 'test_data.bin'}",
            f"neuralnet.layer[1].store_conf.mean_file={mean}",
        ]
    else:
        stores = mnist_stores()
        conf = REPO / "examples" / "mnist" / ("job.conf" if net == "mlp" else "conv.conf")
        data = [
            f"neuralnet.layer[0].store_conf.path={stores / 'train_data.bin'}",
            f"neuralnet.layer[1].store_conf.path={stores / 'test_data.bin'}",
        ]
    settings = [
        *data,
        f"train_steps={steps}",
        f"test_freq={max(1, steps // 2)}",
        "test_steps=2",
        "test_after=0",
        "disp_freq=0",
        "checkpoint_freq=0",
        f"num_openblas_threads={threads}",
    ]
    cmd = ["singa_core.commands.cli", "train", str(conf), "-q"]
    cmd += ["--seed", "0", "--workspace", ws, *extra]
    for s in settings:
        cmd += ["-o", s]
    return cmd


def torch_child(net: str, steps: int, threads: int) -> None:
    """Runs in the child process: ``steps`` PyTorch training steps of ``net``."""
    sys.path.insert(0, str(HERE))
    if net == "mlp":
        from mnist_mlp import torch_step

        step = torch_step(threads)
    else:
        from conv_nets import torch_cifar10, torch_lenet

        step = (torch_lenet if net == "lenet" else torch_cifar10)(threads)
    for i in range(steps):
        step(i)


# run a module as __main__ and report the process's VmHWM on the file descriptor given
# as the first argument when it exits
_REPORT_HWM = """
import atexit, os, runpy, sys
def _report():
    with open('/proc/self/status') as f:
        kb = [line.split()[1] for line in f if line.startswith('VmHWM:')][0]
    os.write(fd, kb.encode())
fd = int(sys.argv.pop(1))
atexit.register(_report)
module = sys.argv.pop(1)
sys.argv[0] = module
runpy.run_module(module, run_name='__main__', alter_sys=True)
"""


def run_reporting(code: str, args: list[str], env: dict, label: str) -> str:
    """Run ``python -c CODE FD ARGS...`` to its end (FD: the write end of a pipe, passed as
    ``sys.argv[1]``); what the process wrote there at its exit. A failed run (or an empty
    report) ends the benchmark, naming ``label`` and the process's last stderr."""
    read, write = os.pipe()
    cmd = [sys.executable, "-c", code, str(write), *args]
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, pass_fds=(write,)
    )
    os.close(write)
    _, err = proc.communicate()
    with os.fdopen(read, "rb") as f:
        raw = f.read().decode().strip()
    if proc.returncode != 0 or not raw:
        text = err.decode(errors="replace")[-2000:]
        raise SystemExit(f"{label[:200]} ... failed ({proc.returncode}):\n{text}")
    return raw


def peak_mib(module_args: list[str], env: dict) -> float:
    """Run ``python -m MODULE ARGS...`` to its end; its peak resident set in MiB."""
    kb = run_reporting(_REPORT_HWM, module_args, env, " ".join(module_args[:4]))
    return int(kb) / 1024.0


NETS = {
    "mlp": "MNIST MLP (job.conf) batch 64",
    "lenet": "LeNet (MNIST conv.conf) batch 64",
    "cifar10": "CIFAR-10 job.conf batch 100",
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--net", choices=[*NETS, "all"], default="all")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--child", choices=list(NETS), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        torch_child(args.child, args.steps, args.threads)
        return
    print_machine_facts(args.threads)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    try:
        import torch  # noqa: F401

        have_torch = True
    except ImportError:
        have_torch = False
        print("pytorch  not installed: pip install torch==2.13.0 for the comparison")
    variants = {"singa": ()}
    if importlib.util.find_spec("tensorboardX") is not None:
        variants["singa --no-tensorboard"] = ("--no-tensorboard",)
    for net in NETS if args.net == "all" else [args.net]:
        peaks = {}
        for name, extra in variants.items():
            with tempfile.TemporaryDirectory(prefix="singa-bench-mem-") as ws:
                cmd = singa_command(net, args.steps, args.threads, ws, *extra)
                peaks[name] = peak_mib(cmd, env)
        if have_torch:
            child = ["peak_memory", "--child", net, "--steps", str(args.steps)]
            peaks["pytorch"] = peak_mib([*child, "--threads", str(args.threads)], env)
        print(f"{NETS[net]}, {args.steps} steps, peak resident memory:")
        for name, mib in peaks.items():
            ratio = f"  ratio to pytorch {mib / peaks['pytorch']:.2f}x" if have_torch else ""
            print(f"  {name:24s} {mib:7.1f} MiB{ratio if name != 'pytorch' else ''}")
        sys.stdout.flush()
    print(f"({load_average()} at the end)")


if __name__ == "__main__":
    main()
