"""Reclaimable page cache is free memory (issue 30): in a 1 GiB cgroup that had read an
800 MB file, a 200 MiB job was refused because memory.current / usage_in_bytes count the
cache of that file. The inactive file cache (v2 ``inactive_file``, v1
``total_inactive_file`` in memory.stat) is subtracted from the usage, on fake cgroup trees
of both versions."""

from __future__ import annotations

from pathlib import Path

from singa_core.memory import MemoryEstimate, system_available_memory
from singa_core.resources import cgroup_memory

MiB = 1 << 20


def fake(tmp_path: Path, cgroup: str, files: dict[str, str], meminfo_kib: int = 64 << 20):
    proc, sys_root = tmp_path / "proc", tmp_path / "sys"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text(cgroup)
    (proc / "meminfo").write_text(f"MemTotal: 99999999 kB\nMemAvailable: {meminfo_kib} kB\n")
    for rel, text in files.items():
        f = sys_root / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    return proc, sys_root


def v2_stat(inactive: int, active: int = 0) -> str:
    return (
        f"anon {120 * MiB}\nfile {inactive + active}\nkernel 4096\n"
        f"active_file {active}\ninactive_file {inactive}\nslab 100\n"
    )


def v1_stat(total_inactive: int, own_inactive: int) -> str:
    return (
        f"cache {total_inactive}\nrss {100 * MiB}\ninactive_file {own_inactive}\n"
        f"active_file 0\nhierarchical_memory_limit {1024 * MiB}\n"
        f"total_cache {total_inactive}\ntotal_inactive_file {total_inactive}\n"
        f"total_active_file 0\n"
    )


def test_v2_inactive_file_counts_as_free(tmp_path):
    """The issue's case: 1 GiB limit, 845.5 MiB in use of which ~800 MiB file cache."""
    proc, root = fake(
        tmp_path,
        "0::/job\n",
        {
            "cgroup.controllers": "cpu memory",
            "job/memory.max": str(1024 * MiB),
            "job/memory.current": str(int(845.5 * MiB)),
            "job/memory.stat": v2_stat(inactive=700 * MiB, active=25 * MiB),
        },
    )
    cg = cgroup_memory(proc, root)
    assert cg.usage == int(845.5 * MiB) and cg.reclaimable == 700 * MiB
    assert cg.in_use == int(145.5 * MiB) and cg.available == int(878.5 * MiB)
    avail, source = system_available_memory(str(proc), str(root))
    assert avail == int(878.5 * MiB)
    assert "minus 145.5 MiB in use (its usage 845.5 MiB less 700.0 MiB of reclaimable" in source
    # a 200 MiB job fits now (it was refused with 178.5 MiB counted as available)
    est = MemoryEstimate(avail, source)
    est.charge("train", "data", "data", 200 * MiB)


def test_v1_total_inactive_file_counts_as_free(tmp_path):
    proc, root = fake(
        tmp_path,
        "4:memory:/slurm/job1\n",
        {
            "memory/slurm/job1/memory.limit_in_bytes": str(1024 * MiB),
            "memory/slurm/job1/memory.usage_in_bytes": str(900 * MiB),
            # total_ (the cgroup and its children, as usage_in_bytes) wins over the own value
            "memory/slurm/job1/memory.stat": v1_stat(total_inactive=780 * MiB, own_inactive=5),
        },
    )
    cg = cgroup_memory(proc, root)
    assert cg.reclaimable == 780 * MiB and cg.available == (1024 - 120) * MiB


def test_v1_without_total_uses_the_own_inactive_file(tmp_path):
    proc, root = fake(
        tmp_path,
        "4:memory:/j\n",
        {
            "memory/j/memory.limit_in_bytes": str(512 * MiB),
            "memory/j/memory.usage_in_bytes": str(500 * MiB),
            "memory/j/memory.stat": f"cache 1\ninactive_file {300 * MiB}\n",
        },
    )
    assert cgroup_memory(proc, root).available == 312 * MiB


def test_no_memory_stat_counts_all_usage(tmp_path):
    proc, root = fake(
        tmp_path,
        "0::/j\n",
        {
            "cgroup.controllers": "memory",
            "j/memory.max": str(1024 * MiB),
            "j/memory.current": str(800 * MiB),
        },
    )
    cg = cgroup_memory(proc, root)
    assert cg.reclaimable == 0 and cg.available == 224 * MiB
    assert "reclaimable" not in system_available_memory(str(proc), str(root))[1]


def test_cache_larger_than_usage_and_garbage_stat(tmp_path):
    proc, root = fake(
        tmp_path,
        "0::/j\n",
        {
            "cgroup.controllers": "memory",
            "j/memory.max": str(100 * MiB),
            "j/memory.current": str(10 * MiB),
            "j/memory.stat": f"inactive_file {50 * MiB}\nnonsense line here\nanon x\n",
        },
    )
    cg = cgroup_memory(proc, root)
    assert cg.reclaimable == 10 * MiB and cg.available == 100 * MiB


def test_the_tightest_ancestor_after_reclaimable_cache(tmp_path):
    """A parent whose raw usage looks tightest but is mostly cache is not the limit."""
    proc, root = fake(
        tmp_path,
        "0::/a/b\n",
        {
            "cgroup.controllers": "memory",
            "a/memory.max": str(1024 * MiB),
            "a/memory.current": str(1000 * MiB),
            "a/memory.stat": v2_stat(inactive=900 * MiB),
            "a/b/memory.max": str(600 * MiB),
            "a/b/memory.current": str(200 * MiB),
            "a/b/memory.stat": v2_stat(inactive=0),
        },
    )
    cg = cgroup_memory(proc, root)
    assert cg.source.endswith("a/b/memory.max") and cg.available == 400 * MiB
