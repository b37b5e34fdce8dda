"""Shared helpers for the benchmarks: data location, timing, thread pinning."""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def mnist_stores() -> Path:
    """A folder with SINGA's MNIST kvfiles: examples/mnist if converted, else a temp copy."""
    ex = REPO / "examples" / "mnist"
    if (ex / "train_data.bin").exists() and (ex / "test_data.bin").exists():
        return ex
    from singa_core.commands.datasets import prepare_dataset
    from singa_core.plugin_host.host import get_host

    out = Path(tempfile.mkdtemp(prefix="singa-bench-mnist-"))
    src = os.environ.get("SINGA_DATA", str(REPO.parent / "shared" / "data"))
    prepare_dataset(get_host().get("dataset", "mnist")(), out, Path(src) / "mnist")
    return out


_VECTOR_FLAGS = (  # /proc/cpuinfo flag -> name printed
    ("avx2", "AVX2"),
    ("fma", "FMA"),
    ("avx512f", "AVX-512F"),
    ("avx512_vnni", "AVX512-VNNI"),
    ("avx512_bf16", "AVX512-BF16"),
    ("amx_tile", "AMX-TILE"),
    ("amx_bf16", "AMX-BF16"),
    ("amx_int8", "AMX-INT8"),
)


def _cpu_model_and_flags() -> tuple[str, set[str]]:
    import platform

    model, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and model in ("", platform.machine(), "x86_64"):
                    model = value.strip()
                elif key == "flags" and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    return model, flags


def machine_facts(threads: int) -> list[str]:
    """What a benchmark's numbers depend on: the CPU and its vector extensions, numpy's
    BLAS and the kernel it picked, PyTorch's version and whether oneDNN is on, the thread
    counts and the load average when the run started."""
    import numpy as np

    from singa_core.blas import get_blas_threads

    model, flags = _cpu_model_and_flags()
    have = [name for flag, name in _VECTOR_FLAGS if flag in flags]
    lacks = [name for flag, name in _VECTOR_FLAGS if flag not in flags]
    lines = [
        f"machine: {model}, {os.cpu_count()} logical CPU(s); "
        f"vector extensions: {', '.join(have) or 'none of AVX2/AVX-512/AMX'}"
        + (f" (not: {', '.join(lacks)})" if flags and lacks else "")
    ]
    blas = f"numpy {np.__version__}"
    try:
        from threadpoolctl import threadpool_info

        infos = [i for i in threadpool_info() if i.get("user_api") == "blas"]
        numpy_blas = [i for i in infos if "numpy" in i.get("filepath", "")] or infos
        for i in numpy_blas[:1]:
            blas += (
                f", BLAS {i.get('internal_api')} {i.get('version')}, kernel "
                f"{i.get('architecture', '?')}, {i.get('threading_layer', '?')} threads"
            )
    except ImportError:
        try:
            dep = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
            blas += f", BLAS {dep.get('name')} {dep.get('version')}"
            blas += " (its kernel: pip install threadpoolctl)"
        except Exception:  # noqa: BLE001 - the facts are best effort
            blas += ", BLAS unknown"
    from singa_core.blas import host_sgemm, set_blas_threads

    started = get_blas_threads() or 1
    set_blas_threads(threads)  # what each run's process does: the GEMMs' library and pool
    gemms = host_sgemm()
    set_blas_threads(started)
    lines.append(blas + f"; singa's GEMMs at {threads} thread(s): {gemms}")
    try:
        import torch

        onednn = torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled
        cap = torch.backends.cpu.get_cpu_capability()
        lines.append(
            f"pytorch {torch.__version__}, oneDNN {'on' if onednn else 'off'}, "
            f"CPU capability {cap}, {torch.get_num_threads()} intra-op thread(s) by default"
        )
    except ImportError:
        lines.append("pytorch not installed (pip install torch==2.13.0 for the comparison)")
    try:
        import numba

        on = os.environ.get("SINGA_NUMBA", "1").strip() != "0"
        state = "on" if on else "off (SINGA_NUMBA=0)"
        lines.append(f"numba {numba.__version__}: compiled pooling kernels {state}")
    except ImportError:
        lines.append("numba not installed: pooling runs its numpy path")
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    lines.append(
        f"threads: {threads} for singa's BLAS and PyTorch's intra-op pool (OpenBLAS "
        f"started with {get_blas_threads()}; each run sets its own); load average at start "
        + (f"{load[0]:.2f}, {load[1]:.2f}, {load[2]:.2f}" if load else "unknown")
    )
    return lines


def print_machine_facts(threads: int) -> None:
    print("\n".join(machine_facts(threads)), flush=True)


def load_average() -> str:
    if not hasattr(os, "getloadavg"):
        return "load average unknown"
    a, b, c = os.getloadavg()
    return f"load average {a:.2f}, {b:.2f}, {c:.2f}"


def interleaved(fns: dict, rounds: int, steps_per_round: int, warmup: int) -> dict:
    """Time several step functions in alternating rounds (A B A B ...), so that the
    machine's speed drifting (shared hosts) affects them alike. Returns name -> times."""
    counters = dict.fromkeys(fns, 0)
    for name, fn in fns.items():
        for _ in range(warmup):
            fn(counters[name])
            counters[name] += 1
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            for _ in range(steps_per_round):
                t0 = time.perf_counter()
                fn(counters[name])
                times[name].append(time.perf_counter() - t0)
                counters[name] += 1
    return times


def standard_args(
    description: str, *, rounds: int, steps: int, warmup: int, extra=None, threads: int = 2
):
    """The options every benchmark takes (rounds, steps per round, warm-up, threads);
    prints the machine facts for the thread count chosen."""
    import argparse

    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--rounds", type=int, default=rounds)
    ap.add_argument("--steps", type=int, default=steps, help="steps per round")
    ap.add_argument("--warmup", type=int, default=warmup)
    ap.add_argument("--threads", type=int, default=threads)
    ap.add_argument(
        "--one-process",
        action="store_true",
        help="time every framework in this one process (the old way; compare)",
    )
    if extra is not None:
        extra(ap)
    args = ap.parse_args()
    print_machine_facts(args.threads)
    return args


# -- each framework in a process of its own ------------------------------------------------
#
# Timed in one process, two frameworks share it with each other's idle thread pools (an
# OpenBLAS or OpenMP pool spinning after its last call while the other library computes).
# ``compare_in_processes`` gives each side a process of its own (spawned: nothing of the
# parent's imports), alternates their rounds, and lets the side that just ran fall idle
# before the other starts; each round begins with untimed steps (LEAD_IN_S). Each side
# also measures its own library's SGEMM peak at the same thread count; PyTorch's side
# counts the step's FLOP (its FlopCounterMode, on the same model), and every side is
# printed with its fraction of the machine's measured peak.

SETTLE_S = 0.3  # a side's pools spin after its round; the other side starts after this
#: each round starts with untimed steps for this long (at least one): after the idle
#: pause (the other side's round and SETTLE_S) this VM runs the first 100-200 ms of steps
#: slower, on one thread as on two (LeNet at 2 threads, 2026-12-01: 13-14 ms a step for the
#: first 10-15 steps after a 0.5 s sleep, then 10-11 as in an unbroken run), where a
#: training run never pauses: timed without the lead-in, the short rounds measured the
#: ramp as much as the step (LeNet's median 13.4-15.4 ms with it, 11.4-12.9 after a lead-in)
LEAD_IN_S = 0.3


def best_seconds(fn, repeats: int) -> float:
    """The shortest of ``repeats`` timed calls of ``fn()``, after one untimed call."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def sgemm_peak_gflops(matmul, n: int = 2048, repeats: int = 3) -> float:
    """The best GFLOP/s of ``matmul()`` (an ``n``×``n``×``n`` float32 product)."""
    return 2 * n**3 / best_seconds(matmul, repeats) / 1e9


def _numpy_peak() -> tuple[str, float]:
    import numpy as np

    from singa_core.contracts.blas import gemm

    n = 2048
    a = np.random.default_rng(0).random((n, n), dtype=np.float32)
    b, c = a.copy(), np.empty_like(a)
    from singa_core.blas import host_sgemm

    name = host_sgemm().split(" (")[0]
    return f"singa's sgemm ({name})", sgemm_peak_gflops(lambda: gemm(a, b, c), n)


def _torch_peak_and_flops(step) -> tuple[str, float, float | None]:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    n = 2048
    a = torch.rand(n, n)
    b, c = a.clone(), torch.empty(n, n)
    peak = sgemm_peak_gflops(lambda: torch.mm(a, b, out=c), n)
    with FlopCounterMode(display=False) as counter:
        step(10**6)  # a step of its own (the counter's dispatch is slow): not timed
    return "PyTorch (torch.mm)", peak, float(counter.get_total_flops())


def memcpy_bandwidth(threads: int, repeats: int = 5) -> float:
    """GB/s (bytes read + written) of a 64 MiB float32 copy, on ``threads`` threads where
    numba is there (a parallel loop on its pool), else numpy's one-thread copy."""
    import numpy as np

    x = np.random.default_rng(0).random(16 << 20, dtype=np.float32)
    y = np.empty_like(x)
    copy = lambda: np.copyto(y, x)  # noqa: E731
    try:
        import numba

        @numba.njit(parallel=True, nogil=True)
        def parallel_copy(src, dst):
            n, parts = src.size, numba.get_num_threads()
            for p in numba.prange(parts):
                lo, hi = n * p // parts, n * (p + 1) // parts
                dst[lo:hi] = src[lo:hi]

        numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))
        copy = lambda: parallel_copy(x, y)  # noqa: E731
    except ImportError:
        pass
    return 2 * x.nbytes / best_seconds(copy, repeats) / 1e9


def _nbytes(x) -> int:
    return int(getattr(x, "nbytes", 0) or 0)


def step_traffic(net) -> dict:
    """The least a training step of ``net`` must compute and move, layer by layer: each
    layer's (forward FLOP, forward bytes, backward FLOP, backward bytes), FLOP from the
    layer's own ``flops()``, bytes its sources' data read, its output written, its params
    read (forward); its gradient read, its sources' gradients and its params' gradients
    written, its params read again (backward); and the update's bytes (each owned Param's
    value and gradient read, its value written)."""
    layers = []
    for layer in net.layers:
        srcs = net.srclayers(layer)
        flops = layer.flops(srcs) or (0.0, 0.0)
        params = sum(_nbytes(p.value) for p in layer.params)
        fwd = sum(_nbytes(s.data) for s in srcs) + _nbytes(layer.data) + params
        src_grads = sum(_nbytes(s.grad_for(layer)) for s in srcs)
        bwd = _nbytes(getattr(layer, "grad", None)) + src_grads + 2 * params
        layers.append((float(flops[0]), float(fwd), float(flops[1]), float(bwd)))
    update = 3.0 * sum(_nbytes(p.value) for p in net.owner_params)
    return {"layers": layers, "update_bytes": update}


def step_roofline(traffic: dict, gemm_gflops: float, bandwidth_gbs: float) -> tuple:
    """(bound seconds, its FLOP-bound part, its byte-bound part): each pass of each layer
    takes at least ``max(FLOP / SGEMM peak, bytes / memcpy bandwidth)``, the update its
    bytes over the bandwidth (a roofline per pass, summed over the step)."""
    peak, bw = gemm_gflops * 1e9, bandwidth_gbs * 1e9
    flop_s = byte_s = 0.0
    for ff, fb, bf, bb in traffic["layers"]:
        for flop, nbytes in ((ff, fb), (bf, bb)):
            if flop / peak >= nbytes / bw:
                flop_s += flop / peak
            else:
                byte_s += nbytes / bw
    byte_s += traffic["update_bytes"] / bw
    return flop_s + byte_s, flop_s, byte_s


def _side(conn, name, factory, fargs, threads) -> None:
    """A spawned side: build the step function, then run rounds on request."""
    step = factory(*fargs)
    if step is None:
        conn.send(("missing", None))
        return
    facts = {}
    if name == "singa":
        peak_of, peak, flops = (*_numpy_peak(), None)
        net = getattr(step, "train_net", None)
        if net is not None:
            facts = {"traffic": step_traffic(net), "bandwidth": memcpy_bandwidth(threads)}
    else:
        peak_of, peak, flops = _torch_peak_and_flops(step)
    conn.send(("ready", {"peak": peak, "peak_of": peak_of, "flops": flops, **facts}))
    i = 0
    while True:
        msg = conn.recv()
        if msg[0] == "stop":
            return
        times = []
        if msg[0] == "round":  # untimed steps first (LEAD_IN_S)
            end = time.perf_counter() + LEAD_IN_S
            step(i)
            i += 1
            while time.perf_counter() < end:
                step(i)
                i += 1
        for _ in range(msg[1]):
            t0 = time.perf_counter()
            step(i)
            times.append(time.perf_counter() - t0)
            i += 1
        conn.send(("times", times))


def _side_env(name: str, threads: int) -> dict:
    """The thread settings of a side's process: its own library gets ``threads``; the
    other's pool (numpy imported by PyTorch) one thread."""
    mine = str(threads)
    if name == "singa":
        return {"OPENBLAS_NUM_THREADS": mine, "OMP_NUM_THREADS": mine}
    return {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": mine, "MKL_NUM_THREADS": mine}


def run_sides(sides: dict, args) -> tuple[dict, dict]:
    """``sides``: name -> (factory, factory args); "singa" builds singa's step. Each runs in
    a spawned process; returns (name -> step times, name -> facts), without the sides
    whose factory returned None (PyTorch not installed)."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    procs, conns, facts = {}, {}, {}
    for name, (factory, fargs) in sides.items():
        parent, child = ctx.Pipe()
        saved = dict(os.environ)
        os.environ.update(_side_env(name, args.threads))
        try:
            p = ctx.Process(target=_side, args=(child, name, factory, fargs, args.threads))
            p.start()
        finally:
            os.environ.clear()
            os.environ.update(saved)
        procs[name], conns[name] = p, parent
        kind, info = parent.recv()  # built one at a time: no side builds while one times
        if kind == "missing":
            p.join()
            del procs[name], conns[name]
        else:
            facts[name] = info
    times: dict[str, list[float]] = {name: [] for name in conns}
    try:
        for conn in conns.values():
            conn.send(("run", args.warmup))
            conn.recv()
            time.sleep(SETTLE_S)
        for _ in range(args.rounds):
            for name, conn in conns.items():
                conn.send(("round", args.steps))
                times[name] += conn.recv()[1]
                time.sleep(SETTLE_S)
    finally:
        for name, conn in conns.items():
            conn.send(("stop",))
            procs[name].join(30)
    return times, facts


def print_roofline(times: dict, facts: dict) -> None:
    """Each side's GFLOP/s and its fraction of the best SGEMM peak measured in this run."""
    if not facts:
        return
    peaks = {f["peak_of"]: f["peak"] for f in facts.values()}
    best_of = max(peaks, key=peaks.get)
    peak = peaks[best_of]
    print("SGEMM peak in this run: " + ", ".join(f"{k} {v:.0f} GFLOP/s" for k, v in peaks.items())
          + f"; the roof: {peak:.0f} GFLOP/s")  # fmt: skip
    flops = next((f["flops"] for f in facts.values() if f.get("flops")), None)
    if flops is None:
        print("FLOP per step: counted on PyTorch's model (pip install torch==2.13.0)")
        return
    print(f"FLOP per step: {flops / 1e9:.3f} G (PyTorch's FlopCounterMode: its matrix "
          "products and convolutions, forward and backward)")  # fmt: skip
    for name, t in times.items():
        rate = flops / (statistics.median(t)) / 1e9
        print(f"  {name:8s} {rate:6.0f} GFLOP/s = {rate / peak:4.0%} of the roof")
    singa = facts.get("singa", {})
    if "traffic" in singa and "singa" in times:
        bound, flop_s, byte_s = step_roofline(singa["traffic"], peak, singa["bandwidth"])
        took = statistics.median(times["singa"])
        print(f"singa's step roofline: {bound * 1e3:.2f} ms = its layers' passes, each at "
              f"its FLOP over the roof or its least bytes over the memcpy bandwidth "
              f"({singa['bandwidth']:.0f} GB/s): {flop_s * 1e3:.2f} ms FLOP-bound + "
              f"{byte_s * 1e3:.2f} ms byte-bound (the update's included)")  # fmt: skip
        print(f"  singa    {bound / took:4.0%} of its step roofline")


def compare_with_pytorch(title: str, sides: dict, args, *, key: str = "", note: str = "") -> dict:
    """Time the ``sides`` (name -> (factory, args); "singa" and "pytorch", maybe a PyTorch
    variant), each in a process of its own (``--one-process``: all in this one, the old
    way, to see what sharing a process changes), in alternating rounds; print each median,
    the ratio singa/pytorch and the roofline (then ``note``, where the step's work differs
    between the sides). Returns name -> step times."""
    import sys

    if getattr(args, "one_process", False):
        fns = {n: f(*a) for n, (f, a) in sides.items()}
        fns = {n: fn for n, fn in fns.items() if fn is not None}
        times, facts = interleaved(fns, args.rounds, args.steps, args.warmup), {}
        where = "one process for all"
    else:
        times, facts = run_sides(sides, args)
        where = f"each in a process of its own, after {LEAD_IN_S:.1f} s of untimed steps a round"
    for name, t in times.items():
        print(f"{name:8s} {title}, {args.threads} thread(s): {summary(t)}")
    print(f"(timed {where}, in alternating rounds of {args.steps} steps)")
    if "pytorch" not in times:
        print("pytorch  not installed: pip install torch==2.13.0 for the comparison")
    else:
        ratio = median_ms(times["singa"]) / median_ms(times["pytorch"])
        print(f"ratio singa/pytorch{' ' + key if key else ''} (median): {ratio:.2f}x")
    print_roofline(times, facts)
    if note:
        print(note)
    print(f"({load_average()} at the end)")
    sys.stdout.flush()
    return times


def summary(times: list[float]) -> str:
    ms = [t * 1000 for t in times]
    return f"median {statistics.median(ms):7.2f} ms/step (min {min(ms):.2f}, max {max(ms):.2f})"


def median_ms(times: list[float]) -> float:
    return statistics.median(times) * 1000


def char_rnn_texts() -> Path:
    """A folder with train.txt, val.txt and vocab.txt of tiny-shakespeare: examples/char-rnn
    if converted, else a temp conversion of $SINGA_DATA/tinyshakespeare."""
    ex = REPO / "examples" / "char-rnn"
    if all((ex / n).exists() for n in ("train.txt", "val.txt", "vocab.txt")):
        return ex
    from singa_core.commands.datasets import prepare_dataset
    from singa_core.plugin_host.host import get_host

    out = Path(tempfile.mkdtemp(prefix="singa-bench-text-"))
    src = os.environ.get("SINGA_DATA", str(REPO.parent / "shared" / "data"))
    prepare_dataset(
        get_host().get("dataset", "tinyshakespeare")(), out, Path(src) / "tinyshakespeare"
    )
    return out


def cifar10_stores() -> Path:
    """A folder with SINGA's CIFAR-10 kvfiles: examples/cifar10 if converted, else a temp
    conversion of $SINGA_DATA/cifar10."""
    ex = REPO / "examples" / "cifar10"
    names = ("train_data.bin", "test_data.bin", "image_mean.bin")
    if all((ex / n).exists() for n in names):
        return ex
    from singa_core.commands.datasets import prepare_dataset
    from singa_core.plugin_host.host import get_host

    out = Path(tempfile.mkdtemp(prefix="singa-bench-cifar10-"))
    src = os.environ.get("SINGA_DATA", str(REPO.parent / "shared" / "data"))
    prepare_dataset(get_host().get("dataset", "cifar10")(), out, Path(src) / "cifar10")
    return out


#: the device singa_train_step puts the worker on (None: job.conf's; benchmarks/gpu.py sets
#: "cuda:0")
DEVICE = None


def singa_train_step(conf: Path, overrides: list[str], threads: int, device=None):
    """One training step (data, forward, backward, update through the stub) of ``conf``
    on the in-process engine, as a function of the step number; on ``device`` (default
    :data:`DEVICE`) the step waits for the device before it returns."""
    from singa_core.blas import set_blas_threads
    from singa_core.jobconf.parse import load_job
    from singa_core.plugin_host.host import get_host
    from singa_core.running.job import prepare_job
    from singa_core.running.reporting import Reporter

    ws = tempfile.mkdtemp(prefix="singa-bench-")
    cfg = load_job(
        conf,
        [*overrides, f"cluster.workspace={ws}", "test_steps=0", f"num_openblas_threads={threads}"],
    )
    host = get_host()
    prepared = prepare_job(cfg, host, seed=0, device=device or DEVICE)
    engine = host.get("engine", "inprocess")(prepared, Reporter(quiet=True))
    set_blas_threads(threads)
    engine._init_params()
    loop = engine._loop()
    stub = loop.stub
    devices = [d for d in set(prepared.devices) if not d.is_host]
    run = loop.step_runner  # as training runs it (e.g. plain SGD folded into the GEMMs)

    def step(s):
        run(s, stub)  # then the stub's flush: the updates a device's server held back
        for d in devices:
            d.synchronize()

    step.train_net = loop.train_net  # for the step's roofline (step_traffic)
    return step


def emulated_machines_recipe():
    """For the scripts on emulated machines: print the machine facts and the load, stop
    with the reason where machines cannot be emulated here, and return the README's
    two-machine recipe (tests/engines/emulated_machines.py)."""
    import sys

    sys.path.insert(0, str(REPO))
    from tests.engines.emulated_machines import namespace_problem, readme_recipe

    print("\n".join(machine_facts(1)[:-1]))  # CPU and BLAS; threads are each actor's own
    print(f"load average at start {load_average().removeprefix('load average ')}")
    problem = namespace_problem()
    if problem:
        raise SystemExit(f"cannot emulate machines here: {problem}")
    return readme_recipe()
