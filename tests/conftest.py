"""Shared fixtures: real datasets, small job.conf builders, a CLI runner."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
CORE_DISTRIBUTION = "singa-classic"


# -- isolation from the plugins installed in this environment --------------------------------
#
# The tests check what singa-classic itself registers (every layer has a gradient case, the
# list of registered names, list-plugins' output, help texts). A plugin the user installed
# (`pip install ./singa-mylayer`, as CONTRIBUTING.md says) would show up in all of them, so
# every third-party distribution found here when the session starts is disabled with
# SINGA_DISABLE_PLUGINS, in this process and in every `singa` the tests start. The fake
# plugins tests make themselves (a --target site folder on PYTHONPATH, a fresh venv) are not
# in that list and load as usual.


def installed_third_party_plugins() -> set[str]:
    """Distribution names of the installed plugins (entry points in the ``singa`` group)
    that are not singa-classic."""
    from importlib import metadata

    names = set()
    for ep in metadata.entry_points(group="singa"):
        if ep.dist is not None and ep.dist.name != CORE_DISTRIBUTION:
            names.add(ep.dist.name)
    return names


def _isolate_from_installed_plugins() -> None:
    found = installed_third_party_plugins()
    if found:
        already = [x for x in os.environ.get("SINGA_DISABLE_PLUGINS", "").split(",") if x]
        os.environ["SINGA_DISABLE_PLUGINS"] = ",".join(sorted(set(already) | found))


_isolate_from_installed_plugins()  # at import: before any test builds the plugin host


# -- optional extras: a missing one skips its tests, naming it -------------------------------

#: top-level module -> the extra of singa-classic that installs it
EXTRA_OF_MODULE = {
    "grpc_tools": "proto",
    "ray": "ray",
    "grpc": "ray",
    "tensorboardX": "tensorboard",
    "tensorboard": "tensorboard",
    "matplotlib": "plot",
    "numba": "fast",
    "PIL": "images",
    "lmdb": "lmdb",
    "onnx": "onnx",
    "safetensors": "export",
    "onnxruntime": "test",
    "hypothesis": "test",
}


def missing_extra_reason(module: str) -> str:
    """The skip reason for a test that needs ``module``, which is not installed."""
    top = module.split(".")[0]
    extra = EXTRA_OF_MODULE.get(top)
    if extra is None:
        return f"needs {top}, which is not installed (not a singa-classic extra: pip install {top})"
    return (
        f"needs the '{extra}' extra ({top} is not installed): "
        f"pip install '{CORE_DISTRIBUTION}[{extra}]'"
    )


def has_module(module: str) -> bool:
    """Whether ``module`` can be imported here."""
    import importlib

    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def needs(module: str):
    """A mark skipping a test (naming the extra) where ``module`` is not installed: for tests
    that need it only in a `singa` they start, or in code that imports it late."""
    return pytest.mark.skipif(not has_module(module), reason=missing_extra_reason(module))


def need_extra(module: str):
    """``pytest.importorskip(module)`` with a reason naming the extra that installs it."""
    return pytest.importorskip(module, reason=missing_extra_reason(module))


def _name_the_extra(report) -> None:
    """Rewrite pytest.importorskip's "could not import 'x'" skip reasons to name the extra."""
    longrepr = getattr(report, "longrepr", None)
    if not (report.skipped and isinstance(longrepr, tuple) and len(longrepr) == 3):
        return
    path, line, reason = longrepr
    text = reason.removeprefix("Skipped: ")
    if text.startswith("could not import '"):
        module = text[len("could not import '") :].split("'")[0]
        report.longrepr = (path, line, "Skipped: " + missing_extra_reason(module))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _name_the_extra(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    _name_the_extra(outcome.get_result())


def pytest_addoption(parser):
    parser.addoption(
        "--fuzz-long",
        action="store_true",
        help="run the fuzz tests (tests/fuzz) 100 times longer; same as SINGA_FUZZ_LONG=1",
    )
    parser.addoption(
        "--store-file-durations",
        action="store_true",
        help="store each test file's duration in this run in tests/file_durations.json "
        "(the order pytest -n hands files out in; other files' figures are kept)",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """``pytest -n N`` (pytest-xdist) hands tests out a file at a time (``--dist loadfile``)
    unless told otherwise: a module's checks that share one costly fixture (a wheel, a set
    of emulated machines) build it once, and run in their order. (``--dist loadgroup``
    would do it per mark, but xdist 3.8 cannot tag the test ids of pytest 9.)"""
    if getattr(config.option, "numprocesses", None) and config.option.dist == "no":
        config.option.dist = "loadfile"
        config.option.loadscopereorder = False  # the files in the order sorted below


#: seconds each test file took in a whole run on 2 cores under ``-n auto`` (setup, call and
#: teardown of its tests), the order in which pytest -n hands the files out; refresh with
#: ``python -m pytest -n auto --store-file-durations`` after adding a heavy test
FILE_DURATIONS = Path(__file__).with_name("file_durations.json")


def _expected_seconds(items) -> dict:
    """Each file's expected duration: the stored figure, else an estimate from its marks
    (a slow test a few seconds, any other a few hundredths)."""
    import json

    stored = json.loads(FILE_DURATIONS.read_text()) if FILE_DURATIONS.exists() else {}
    guess: dict = {}
    for item in items:
        slow = item.get_closest_marker("slow") is not None
        guess[item.path] = guess.get(item.path, 0.0) + (5.0 if slow else 0.05)
    root = Path(__file__).parent.parent
    out = {}
    for path, estimate in guess.items():
        try:
            key = path.relative_to(root).as_posix()
        except ValueError:
            key = str(path)
        out[path] = stored.get(key, estimate)
    return out


def pytest_collection_modifyitems(config, items):
    """On a pytest -n worker (every worker collects the same order): the files longest
    first, each file's tests in their own order; xdist hands them out in this order
    (pytest_cmdline_main turns its own reordering off). Longest first keeps the end of the
    run to short files, so neither worker waits long for the other; with the files by
    number of tests (xdist's order) the one-test Ray modules, minutes each, came last."""
    if not hasattr(config, "workerinput"):
        return
    seconds = _expected_seconds(items)
    items.sort(key=lambda item: -seconds[item.path])  # stable: the order within a file kept


_file_seconds: dict[str, float] = {}


#: a test not marked slow that takes longer than this is named at the end of the run, so the
#: quick subset (``-m "not slow"``) stays quick
UNMARKED_SLOW_S = 5.0
_unmarked_slow: list[tuple[float, str]] = []


def pytest_runtest_logreport(report):
    path = report.nodeid.split("::")[0]
    _file_seconds[path] = _file_seconds.get(path, 0.0) + report.duration
    if report.when == "call" and report.duration > UNMARKED_SLOW_S:
        if "slow" not in report.keywords:
            _unmarked_slow.append((report.duration, report.nodeid))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if config.getoption("--store-file-durations") and not hasattr(config, "workerinput"):
        import json

        known = json.loads(FILE_DURATIONS.read_text()) if FILE_DURATIONS.exists() else {}
        known.update({k: round(v, 1) for k, v in _file_seconds.items()})  # this run's files
        ranked = sorted(known.items(), key=lambda kv: -kv[1])
        text = json.dumps({k: v for k, v in ranked if v >= 0.1}, indent=1) + "\n"
        tmp = FILE_DURATIONS.with_suffix(".json.tmp")
        tmp.write_text(text)
        os.replace(tmp, FILE_DURATIONS)
        terminalreporter.write_line(
            f"stored the durations of this run's {len(_file_seconds)} files in {FILE_DURATIONS}"
        )
    if _unmarked_slow:
        terminalreporter.section("tests to mark slow")
        for took, nodeid in sorted(_unmarked_slow, reverse=True):
            terminalreporter.write_line(
                f"{took:.1f} s {nodeid}: over {UNMARKED_SLOW_S:.0f} s without @pytest.mark.slow"
            )


def pytest_configure(config):
    if config.getoption("--fuzz-long"):
        os.environ["SINGA_FUZZ_LONG"] = "1"  # read by tests/fuzz/fuzzing.py at import


@contextlib.contextmanager
def busy_processes(n: int):
    """``n`` Python processes spinning on a core each (an artificial load) for the body of
    the ``with``; killed and reaped when it ends, however it ends. Yields their Popens."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield procs
    finally:
        for p in procs:
            p.kill()
            p.wait()


def shared_data_dir() -> Path:
    """$SINGA_DATA, else ../shared/data next to the checkout (as CI sets it)."""
    env = os.environ.get("SINGA_DATA")
    return Path(env) if env else REPO.parent / "shared" / "data"


@pytest.fixture
def big_tmp_path(tmp_path):
    """``tmp_path``, emptied when the test ends, passed or failed: for the tests that write
    gigabytes (pytest keeps the temporary folders of the last three runs, and two 610 MB
    checkpoint tests kept 3.5 GB each; with leftovers of earlier runs they filled a disk)."""
    yield tmp_path
    shutil.rmtree(tmp_path, ignore_errors=True)


@pytest.fixture(scope="session")
def data_dir() -> Path:
    d = shared_data_dir()
    if not (d / "mnist").is_dir():
        pytest.fail(f"datasets not found at {d}: set SINGA_DATA to the shared data folder")
    return d


@pytest.fixture(scope="session")
def mnist_stores(data_dir, tmp_path_factory) -> Path:
    """SINGA's MNIST kvfiles (train_data.bin, test_data.bin), converted once per session."""
    from singa_core.commands.datasets import prepare_dataset
    from singa_core.plugin_host.host import get_host

    out = tmp_path_factory.mktemp("mnist")
    conv = get_host().get("dataset", "mnist")()
    prepare_dataset(conv, out, data_dir / "mnist")
    return out


def write_csv_blobs(path: Path, n: int = 200, dim: int = 4, classes: int = 3, seed: int = 0):
    """A small, learnable CSV dataset: 'label,x1,...,xd' lines of Gaussian blobs."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(0, 3, size=(classes, dim))
    labels = rng.integers(0, classes, size=n)
    x = centers[labels] + rng.normal(0, 0.5, size=(n, dim))
    with open(path, "w") as f:
        for lab, row in zip(labels, x, strict=True):
            f.write(",".join([str(lab)] + [f"{v:.5f}" for v in row]) + "\n")
    return path


def mlp_conf(
    data: Path,
    workspace: Path,
    *,
    steps: int = 60,
    extra: str = "",
    dim: int = 4,
    classes: int = 3,
    hidden: int = 16,
    dropout: bool = False,
    momentum: float = 0.9,
    checkpoint_freq: int = 0,
    batch: int = 20,
) -> str:
    """A small job.conf (kCSVInput -> ip -> tanh -> [dropout] -> ip -> softmax loss)."""
    drop = (
        'layer { name: "drop" type: kDropout srclayers: "tanh" '
        "dropout_conf { dropout_ratio: 0.2 } }"
        if dropout
        else ""
    )
    after = "drop" if dropout else "tanh"
    return f"""
name: "small"
train_steps: {steps}
disp_freq: 10
test_steps: 5
test_freq: 30
checkpoint_freq: {checkpoint_freq}
train_one_batch {{ alg: kBP }}
updater {{
  type: kSGD
  momentum: {momentum}
  weight_decay: 0.0001
  learning_rate {{ type: kStep base_lr: 0.05 step_conf {{ change_freq: 20 gamma: 0.9 }} }}
}}
neuralnet {{
  layer {{
    name: "data" type: kCSVInput
    store_conf {{ backend: "textfile" path: "{data}" batchsize: {batch} shape: {dim}
                  random_skip: 10 }}
  }}
  layer {{
    name: "ip1" type: kInnerProduct srclayers: "data"
    innerproduct_conf {{ num_output: {hidden} }}
    param {{ name: "w1" init {{ type: kUniform low: -0.3 high: 0.3 }} }}
    param {{ name: "b1" init {{ type: kConstant value: 0 }} }}
  }}
  layer {{ name: "tanh" type: kSTanh srclayers: "ip1" }}
  {drop}
  layer {{
    name: "ip2" type: kInnerProduct srclayers: "{after}"
    innerproduct_conf {{ num_output: {classes} }}
    param {{ name: "w2" init {{ type: kGaussian std: 0.1 }} }}
    param {{ name: "b2" init {{ type: kConstant value: 0 }} lr_scale: 2 wd_scale: 0 }}
  }}
  layer {{ name: "loss" type: kSoftmaxLoss srclayers: "ip2" srclayers: "data" }}
  {extra}
}}
cluster {{ workspace: "{workspace}" }}
"""


@pytest.fixture
def small_job(tmp_path):
    """(path of job.conf, workspace) for a quick-to-train small MLP on CSV blobs."""

    def make(**kw) -> tuple[Path, Path]:
        data = write_csv_blobs(tmp_path / "blobs.csv")
        ws = tmp_path / "ws"
        conf = tmp_path / "job.conf"
        conf.write_text(mlp_conf(data, ws, **kw))
        return conf, ws

    return make


# -- the shm engine's segments of this test's own jobs ----------------------------------------
#
# Tests run in parallel (pytest -n auto): another test's job may create and remove segments in
# /dev/shm at any moment, so a test checks only the segments of jobs it started itself. The
# shm engine names them singa-<launcher pid>-<token>-<what>; the launcher is either this
# process (a job run in-process) or a `singa` this test started (run_singa, or track()).

# One set, even when this file is imported twice (as `conftest` by pytest and as
# `tests.conftest` by some test modules): kept on the sys module, which both copies share.
_STARTED: set[int] = sys.__dict__.setdefault("_singa_tests_started_pids", set())


def track(proc: subprocess.Popen) -> subprocess.Popen:
    """Count ``proc`` (a `singa` started with Popen) among this test's jobs; returns it."""
    _STARTED.add(proc.pid)
    return proc


@pytest.fixture(autouse=True)
def _forget_started_jobs():
    _STARTED.clear()
    yield


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def own_shm_segments() -> set[str]:
    """The names in /dev/shm of shm-engine segments made by this test's jobs: this process's
    and those of the `singa` processes it started that have ended (a live process of that
    number is someone else's, the number having been reused)."""
    if not os.path.isdir("/dev/shm"):
        return set()
    me = os.getpid()
    out = set()
    for name in os.listdir("/dev/shm"):
        parts = name.split("-")
        if len(parts) < 3 or parts[0] != "singa" or not parts[1].isdigit():
            continue  # not the shm engine's (Ray's are singa-ray-...)
        pid = int(parts[1])
        if pid == me or (pid in _STARTED and not _alive(pid)):
            out.add(name)
    return out


def run_singa(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: int = 600):
    """Run the real `singa` command in a subprocess; returns CompletedProcess. A run still
    going after ``timeout`` seconds fails the test with the Python stacks of all its
    processes (see :func:`_stacks_then_kill`)."""
    full_env = {"PYTHONFAULTHANDLER": "1", **os.environ}
    full_env.update(env or {})
    with subprocess.Popen(
        [sys.executable, "-m", "singa_core.commands.cli", *args],
        cwd=cwd or REPO,
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        track(proc)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            stacks = _stacks_then_kill(proc)
            raise AssertionError(
                f"`singa {' '.join(args)}` was still running after {timeout} s; the stacks "
                f"of its processes, then its stderr:\n{stacks}"
            ) from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _stacks_then_kill(proc: subprocess.Popen) -> str:
    """A hung run: SIGABRT to it and every process below it (each Python process prints
    all its threads' stacks: run_singa sets PYTHONFAULTHANDLER), then SIGKILL to any left;
    removes the segments the launcher left in /dev/shm; returns the end of what they wrote
    to stderr, after the order in which they wrote it.

    All of them are stopped first (SIGSTOP), then each in turn is sent SIGABRT and
    continued, with a pause for it to write: the stacks come one process after another
    instead of interleaved, and none of them sees a peer die (and tears down) before its
    own stacks are taken, so each shows the hang."""
    from singa_builtins.engines.ray.headwatch import descendants  # /proc; needs no Ray

    pids = [*descendants(proc.pid), proc.pid]
    # multiprocessing's resource tracker is left alone: once the others are dead it
    # unlinks the named semaphores they made and exits (killed, it left 15 in /dev/shm)
    trackers = [p for p in pids if b"resource_tracker" in _cmdline(p)]
    pids = [p for p in pids if p not in trackers]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
    order = []
    for pid in pids:
        try:
            name = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            name = "?"
        order.append(f"  {pid}: {name[:160]}")
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGABRT)
            os.kill(pid, signal.SIGCONT)
        time.sleep(0.5)
    try:
        _, err = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while any(_alive(p) and b"resource_tracker" in _cmdline(p) for p in trackers):
        if time.monotonic() > deadline:  # it should have ended: stop it after all
            for pid in trackers:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            break
        time.sleep(0.05)
    if os.path.isdir("/dev/shm"):  # the killed launcher's segments (singa-<its pid>-...)
        for name in os.listdir("/dev/shm"):
            if name.startswith(f"singa-{proc.pid}-"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(f"/dev/shm/{name}")
    head = "processes, in the order their stacks follow:\n" + "\n".join(order) + "\n"
    return head + (err or "")[-30000:]


def act_and_wait(proc: subprocess.Popen, ready, act, *, timeout: int = 60) -> tuple:
    """``ready()`` waits until a running ``singa`` process is where the test wants it,
    ``act(what ready returned)`` does something to it (a signal, a kill of one of its
    parts); returns (stdout, stderr, seconds from the act to the end) once it has ended. If
    anything fails on the way the process is killed, so no test leaves a run behind."""
    try:
        act(ready())
        t0 = time.monotonic()
        out, err = proc.communicate(timeout=timeout)
        return out, err, time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()


def interrupt(proc: subprocess.Popen, ready, *, times: int = 1, timeout: int = 60) -> tuple:
    """Ctrl-C ``proc`` the way a user does, ``times`` times, once ``ready()`` returns:
    (stdout, stderr) once it has ended (see :func:`act_and_wait`)."""

    def ctrl_c(_):
        for _ in range(times):
            proc.send_signal(signal.SIGINT)

    out, err, _ = act_and_wait(proc, ready, ctrl_c, timeout=timeout)
    return out, err


def mnist_example_args(stores: Path) -> list[str]:
    """``-o`` overrides pointing an examples/mnist job.conf at converted stores."""
    return [
        "-o",
        f"neuralnet.layer[0].store_conf.path={stores / 'train_data.bin'}",
        "-o",
        f"neuralnet.layer[1].store_conf.path={stores / 'test_data.bin'}",
    ]


def full_test_accuracy(runner, app, conf: Path, workspace: Path, args: list[str]) -> float:
    """`singa test --steps 100` (all 10,000 MNIST test images) of the newest checkpoint."""
    res = runner.invoke(
        app, ["test", str(conf), "--steps", "100", *args, "-o", f"cluster.workspace={workspace}"]
    )
    assert res.exit_code == 0, res.output
    return float(res.output.split("accuracy = ")[1].split()[0].rstrip(","))


def invoke_singa(*args):
    """``singa ARGS`` in this process (typer's CliRunner); arguments may be Paths."""
    from typer.testing import CliRunner

    from singa_core.commands.cli import app

    return CliRunner().invoke(app, [str(a) for a in args])


def singa_ok(*args):
    """:func:`invoke_singa`, asserting exit status 0."""
    res = invoke_singa(*args)
    assert res.exit_code == 0, res.output
    return res


@pytest.fixture(scope="session")
def cifar_stores(data_dir, tmp_path_factory) -> Path:
    from singa_core.commands.datasets import prepare_dataset
    from singa_core.plugin_host.host import get_host

    out = tmp_path_factory.mktemp("cifar10")
    prepare_dataset(get_host().get("dataset", "cifar10")(), out, data_dir / "cifar10")
    return out


@pytest.fixture(scope="session")
def texts(data_dir, tmp_path_factory) -> Path:
    from singa_core.commands.datasets import prepare_dataset
    from singa_core.plugin_host.host import get_host

    out = tmp_path_factory.mktemp("texts")
    prepare_dataset(
        get_host().get("dataset", "tinyshakespeare")(), out, data_dir / "tinyshakespeare"
    )
    return out
