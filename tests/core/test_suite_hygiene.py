"""The test suite itself: isolated from the plugins installed where it runs, a missing
optional extra skips its tests naming the extra, and the checks of /dev/shm look only at
the test's own jobs (so `pytest -n auto` can run tests side by side)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from multiprocessing import shared_memory
from pathlib import Path

import pytest
from conftest import REPO, missing_extra_reason, own_shm_segments, run_singa, track

MYLAYER = """
from singa_core import hookimpl
from singa_core.layer import NeuronLayer


class Mylayer(NeuronLayer):
    def setup(self, srcs):
        self.alloc(srcs[0].shape)

    def forward(self, phase, srcs):
        self.data[...] = srcs[0].data


@hookimpl
def singa_register_layers(register):
    register("kMylayer", Mylayer)
"""


def _installed_plugin(site: Path) -> None:
    """A plugin distribution installed in ``site`` as `pip install ./singa-mylayer` would:
    a module and its dist-info with an entry point in the ``singa`` group."""
    site.mkdir()
    (site / "singa_mylayer.py").write_text(textwrap.dedent(MYLAYER))
    info = site / "singa_mylayer-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: singa-mylayer\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text("[singa]\nmylayer = singa_mylayer\n")


def _pytest(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", *args],
        cwd=REPO,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.slow
def test_a_plugin_the_user_installed_does_not_reach_the_core_tests(tmp_path):
    site = tmp_path / "site"
    _installed_plugin(site)
    env = {"PYTHONPATH": str(site), "SINGA_DISABLE_PLUGINS": ""}
    # installed: singa sees it outside the tests
    listed = run_singa("list-plugins", env=env)
    assert listed.returncode == 0 and "kMylayer" in listed.stdout, listed.stdout + listed.stderr
    # core tests that compare what is registered still pass (the first failed with "Extra
    # items in the left set: ('kMylayer', 'user')" before the isolation)
    res = _pytest(
        "tests/core/test_plugin_host.py::test_third_party_string_registration_of_an_enum_name_"
        "serves_user_type",
        "tests/layers/test_registry_gradients.py::test_every_registered_layer_has_a_case",
        env=env,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert "2 passed" in res.stdout


@pytest.mark.slow
def test_a_missing_extra_skips_its_tests_and_names_the_extra():
    hide = str(REPO / "tests" / "without_extras")  # sitecustomize hiding the modules named
    env = {"PYTHONPATH": hide, "SINGA_TEST_WITHOUT": "grpc_tools,ray"}
    res = _pytest(
        "tests/test_third_party_plugin.py::test_list_plugins_shows_it",
        "tests/engines/test_ray_auth.py::test_the_options_reach_ray_options",
        "tests/engines/test_ray_signals.py",
        "tests/test_schema.py",
        env=env,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert " failed" not in res.stdout and " error" not in res.stdout
    proto = (
        "needs the 'proto' extra (grpc_tools is not installed): pip install 'singa-classic[proto]'"
    )
    ray = "needs the 'ray' extra (ray is not installed): pip install 'singa-classic[ray]'"
    skips = [line for line in res.stdout.splitlines() if line.startswith("SKIPPED")]
    assert any(proto in line and "test_third_party_plugin" in line for line in skips), skips
    assert any(proto in line and "test_schema" in line for line in skips), skips
    assert sum(ray in line for line in skips) >= 2, skips
    assert all("could not import" not in line for line in skips), skips


def test_skip_reasons_name_the_extra_or_say_there_is_none():
    assert missing_extra_reason("PIL.Image") == (
        "needs the 'images' extra (PIL is not installed): pip install 'singa-classic[images]'"
    )
    assert "not a singa-classic extra: pip install torch" in missing_extra_reason("torch")


def test_only_the_tests_own_shm_segments_are_counted():
    """Segments of another test's job (a live launcher not started here) are not counted;
    this process's and those of an ended `singa` this test started are."""
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    ended = track(subprocess.Popen([sys.executable, "-c", "pass"]))
    ended.wait()
    made = []
    try:
        for pid in (os.getpid(), other.pid, ended.pid):
            name = f"singa-{pid}-hyg{pid % 1000}-v0"
            made.append(shared_memory.SharedMemory(name=name, create=True, size=8))
        ray_like = shared_memory.SharedMemory(name=f"singa-ray-{os.getpid()}", create=True, size=8)
        made.append(ray_like)
        own = own_shm_segments()
        assert f"singa-{os.getpid()}-hyg{os.getpid() % 1000}-v0" in own
        assert f"singa-{ended.pid}-hyg{ended.pid % 1000}-v0" in own
        assert not any(n.startswith(f"singa-{other.pid}-") for n in own)
        assert f"singa-ray-{os.getpid()}" not in own
    finally:
        other.kill()
        other.wait()
        for seg in made:
            seg.close()
            seg.unlink()


def _trained(ws: Path) -> bool:
    """Whether the run in ``ws`` had trained a step (its metrics.jsonl has a train record)."""
    path = ws / "metrics.jsonl"
    return path.exists() and '"phase": "train"' in path.read_text()


@pytest.mark.slow
def test_a_hung_run_fails_with_the_stacks_of_all_its_processes(small_job):
    """run_singa's timeout: a `singa` still running prints the Python stacks of the launcher
    and of its worker and server processes, and none of them is left running."""
    conf, _ = small_job(steps=10_000_000)
    args = ["-o", "cluster.nworker_groups=2", "-o", "cluster.server_worker_separate=true"]
    # the hang: a run still training when the timeout comes. Its processes start in about
    # a second, but a loaded machine may take longer than the timeout: then the run had
    # not started training yet (its workspace shows no training step), and the longer
    # timeout of the next attempt gives it time to
    for attempt, timeout in enumerate((8, 20, 60)):
        ws = conf.parent / f"hung{attempt}"
        with pytest.raises(AssertionError) as info:
            run_singa("train", str(conf), "--engine", "shm", "-q", *args,
                      "--workspace", str(ws), timeout=timeout)  # fmt: skip
        if _trained(ws):
            break
    text = str(info.value)
    assert f"was still running after {timeout} s" in text
    stacks = text.count("Current thread") + text.count("Thread 0x")
    assert stacks >= 3, text[-3000:]  # the launcher, two worker groups, a server
    assert "singa_core" in text or "singa_builtins" in text, text[-3000:]
    # one process after another: each dump is whole (its "Fatal Python error" line, its
    # threads, then at most one "Extension modules" line),
    # and the processes' order heads the text
    assert "processes, in the order their stacks follow:" in text
    dumps = text.split("Fatal Python error: Aborted")[1:]
    whole = [d.count("Extension modules:") <= 1 and "(most recent call first)" in d for d in dumps]
    assert len(dumps) >= 3 and all(whole), text[-3000:]
    assert not own_shm_segments()  # the killed launcher's segments are removed


def test_pytest_n_hands_out_the_longest_files_first():
    """The order of files under pytest -n: the stored durations (tests/file_durations.json)
    longest first, a file missing there estimated from its marks, each file's own order
    kept."""
    import json
    import types

    import conftest

    stored = json.loads(conftest.FILE_DURATIONS.read_text())
    ray, small = "tests/engines/test_ray_machines.py", "tests/core/test_fileio.py"
    assert stored[ray] > 60 and stored.get(small, 0) < 5

    def item(rel, name, slow=False):
        marker = object() if slow else None
        return types.SimpleNamespace(
            path=REPO / rel, name=name, get_closest_marker=lambda _m, marker=marker: marker
        )

    items = [
        item(small, "a"),
        item("tests/not_stored_yet.py", "n1", slow=True),
        item("tests/not_stored_yet.py", "n2", slow=True),
        item(ray, "r1"),
        item(small, "b"),
        item(ray, "r2"),
    ]
    config = types.SimpleNamespace(workerinput={})
    conftest.pytest_collection_modifyitems(config, items)
    assert [i.name for i in items] == ["r1", "r2", "n1", "n2", "a", "b"]
    assert conftest.FILE_DURATIONS.name == "file_durations.json"
