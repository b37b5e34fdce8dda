"""Container-aware resources (issue 21): cgroup memory and CPU readers on fake /proc and
/sys trees, the memory check in a real memory cgroup, CPUs under taskset, BLAS threads."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from singa_core.memory import system_available_memory
from singa_core.resources import (
    cgroup_cpu_quota,
    cgroup_memory,
    usable_cpus,
    usable_cpus_explained,
)

MiB = 1 << 20


def fake(tmp_path: Path, cgroup: str, files: dict[str, str], meminfo_kib: int = 8 << 20):
    proc, sys_root = tmp_path / "proc", tmp_path / "sys"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text(cgroup)
    (proc / "meminfo").write_text(f"MemTotal: 99999999 kB\nMemAvailable: {meminfo_kib} kB\n")
    for rel, text in files.items():
        f = sys_root / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    return proc, sys_root


def test_v2_memory_max_minus_current_tightest_ancestor(tmp_path):
    proc, root = fake(
        tmp_path,
        "0::/user.slice/job\n",
        {
            "cgroup.controllers": "cpu memory",
            "user.slice/memory.max": str(1024 * MiB),
            "user.slice/memory.current": str(100 * MiB),
            "user.slice/job/memory.max": str(300 * MiB),
            "user.slice/job/memory.current": str(20 * MiB),
        },
    )
    cg = cgroup_memory(proc, root)
    assert cg.limit == 300 * MiB and cg.available == 280 * MiB
    assert cg.source.endswith("user.slice/job/memory.max")
    avail, source = system_available_memory(str(proc), str(root))
    assert avail == 280 * MiB and "cgroup memory limit 300.0 MiB" in source


def test_v2_unlimited_falls_back_to_meminfo(tmp_path):
    proc, root = fake(
        tmp_path,
        "0::/a\n",
        {"cgroup.controllers": "memory", "a/memory.max": "max", "a/memory.current": "5"},
        meminfo_kib=2048,
    )
    assert cgroup_memory(proc, root) is None
    assert system_available_memory(str(proc), str(root)) == (
        2048 * 1024,
        "MemAvailable in /proc/meminfo",
    )


def test_v1_limit_in_bytes_and_a_container_root(tmp_path):
    # the process's cgroup path is not visible under the mount (no cgroup namespace): the
    # mount's root is the container's own cgroup
    proc, root = fake(
        tmp_path,
        "4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n",
        {
            "memory/memory.limit_in_bytes": str(512 * MiB),
            "memory/memory.usage_in_bytes": str(12 * MiB),
            "cpu,cpuacct/cpu.cfs_quota_us": "150000",
            "cpu,cpuacct/cpu.cfs_period_us": "100000",
        },
    )
    assert cgroup_memory(proc, root).available == 500 * MiB
    assert cgroup_cpu_quota(proc, root)[0] == pytest.approx(1.5)


def test_v1_unlimited_is_none(tmp_path):
    proc, root = fake(
        tmp_path,
        "4:memory:/x\n",
        {"memory/x/memory.limit_in_bytes": "9223372036854771712"},
    )
    assert cgroup_memory(proc, root) is None


def test_cpu_quota_v2_caps_the_affinity_mask(tmp_path):
    proc, root = fake(
        tmp_path, "0::/j\n", {"cgroup.controllers": "cpu", "j/cpu.max": "50000 100000"}
    )
    assert cgroup_cpu_quota(proc, root) == (0.5, str(root / "j" / "cpu.max"))
    n, why = usable_cpus_explained(proc, root)
    assert n == 1 and "cgroup CPU quota of 0.50 CPU" in why
    proc2, root2 = fake(tmp_path / "b", "0::/j\n", {"cgroup.controllers": "", "j/cpu.max": "max"})
    assert cgroup_cpu_quota(proc2, root2) is None
    assert usable_cpus(proc2, root2) == len(os.sched_getaffinity(0))


def test_garbage_files_mean_no_limit(tmp_path):
    proc, root = fake(
        tmp_path,
        "garbage\n0::/j\n",
        {"cgroup.controllers": "", "j/memory.max": "lots", "j/cpu.max": "x y"},
    )
    assert cgroup_memory(proc, root) is None and cgroup_cpu_quota(proc, root) is None


@pytest.mark.skipif(shutil.which("taskset") is None, reason="no taskset")
def test_taskset_one_cpu_means_one_blas_thread(small_job):
    conf, _ = small_job(steps=2)
    out = subprocess.run(
        ["taskset", "-c", "0", sys.executable, "-m", "singa_core.commands.cli", "train",
         str(conf), "--dry-run"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
        env={k: v for k, v in os.environ.items() if not k.endswith("NUM_THREADS")},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "1 BLAS thread(s)" in out.stdout


def _make_memory_cgroup(limit: int) -> Path | None:
    """A memory cgroup (v2 child, else v1) limited to ``limit``, or None if not allowed."""
    name = f"singa-test-{os.getpid()}"
    for base, knob in (
        (Path("/sys/fs/cgroup"), "memory.max"),
        (Path("/sys/fs/cgroup/memory"), "memory.limit_in_bytes"),
    ):
        if knob == "memory.max" and not (base / "cgroup.controllers").exists():
            continue
        if not base.is_dir():
            continue
        try:
            d = base / name
            d.mkdir()
            (d / knob).write_text(str(limit))
            return d
        except OSError:
            try:
                (base / name).rmdir()
            except OSError:
                pass
    return None


def test_dry_run_in_a_300_mib_cgroup_names_the_limit(tmp_path, small_job):
    cg = _make_memory_cgroup(300 * MiB)
    if cg is None:
        pytest.skip("cannot create a memory cgroup here (not root, or no writable cgroupfs)")
    try:
        # ~480 MB of Params in ip1 alone: more than the cgroup allows
        conf, _ = small_job(steps=2, dim=4, hidden=30_000_000)
        env = {k: v for k, v in os.environ.items() if k != "SINGA_MEMORY_AVAILABLE"}
        code = f"import os; open({str(cg / 'cgroup.procs')!r}, 'w').write(str(os.getpid()))\n"
        code += "import sys; from singa_core.commands.cli import main; sys.argv[1:] = "
        code += repr(["train", str(conf), "--dry-run"]) + "; main()"
        out = subprocess.run(
            [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
            env=env,
        )  # fmt: skip
        assert out.returncode == 2, out.stdout + out.stderr
        assert "not enough memory: layer 'ip1'" in out.stderr
        assert "cgroup memory limit 300.0 MiB" in out.stderr and str(cg) in out.stderr
        assert f"{conf}:" in out.stderr and "Traceback" not in out.stderr
    finally:
        try:
            cg.rmdir()
        except OSError:
            pass


def test_blas_threads_through_threadpoolctl():
    from threadpoolctl import threadpool_info

    from singa_core.blas import blas_threads_problem, set_blas_threads

    before = [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]
    try:
        assert set_blas_threads(1)
        blas = [lib for lib in threadpool_info() if lib["user_api"] == "blas"]
        assert blas and all(lib["num_threads"] == 1 for lib in blas)
        assert blas_threads_problem(1) is None
    finally:
        set_blas_threads(max(before or [1]))
