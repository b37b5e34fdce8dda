"""What this process may really use: memory and CPUs under containers and schedulers.

A container, a systemd unit or a Slurm job limits a process through its cgroup, and
``taskset``/``numactl``/Slurm pin it to some CPUs; ``/proc/meminfo`` and ``os.cpu_count()``
show neither. The readers here take them into account:

* :func:`cgroup_memory` — the tightest memory limit of this process's cgroup and its
  ancestors, minus what the cgroup already uses: cgroup v2 ``memory.max`` /
  ``memory.current``, cgroup v1 ``memory.limit_in_bytes`` / ``memory.usage_in_bytes``.
  The usage counts the page cache of files the cgroup read; its inactive part (v2
  ``inactive_file``, v1 ``total_inactive_file`` in ``memory.stat``) is reclaimed before the
  cgroup runs out, so it counts as free (as the kernel's own MemAvailable counts it).
* :func:`usable_cpus` — the CPUs of the affinity mask (``sched_getaffinity``), capped by
  the cgroup CPU quota (v2 ``cpu.max``, v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``),
  rounded up.
* :func:`cpu_flags` — the CPU's feature flags (``avx2``, ``avx512f`` …) from
  ``/proc/cpuinfo``, for code that picks a path by what the machine is, not by a clock.
* :func:`cache_bytes` — the first CPU's data (or unified) cache size at a level, from
  ``/sys/devices/system/cpu/cpu0/cache``, for the same kind of choice.

Both take the ``/proc`` and ``/sys/fs/cgroup`` roots as arguments so tests can hand them
fake trees. A missing or unreadable file means "no limit known here", never an error.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

#: cgroup "no limit" values are huge (v1: 2^63 rounded to a page); anything above is none
UNLIMITED = 1 << 60


@dataclass
class CgroupMemory:
    """A cgroup's memory limit and usage (bytes) and the file the limit came from."""

    limit: int
    usage: int
    source: str
    reclaimable: int = 0  # inactive file cache within ``usage``, given back under pressure

    @property
    def in_use(self) -> int:
        """The usage that is not reclaimable page cache."""
        return max(self.usage - self.reclaimable, 0)

    @property
    def available(self) -> int:
        return max(self.limit - self.in_use, 0)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _int(path: Path) -> int | None:
    text = _read(path)
    if text is None or text == "max":
        return None
    try:
        return int(text.split()[0])
    except (ValueError, IndexError):
        return None


def _stat_value(folder: Path, *names: str) -> int:
    """The first of ``names`` found in ``folder/memory.stat`` (bytes), else 0."""
    text = _read(folder / "memory.stat") or ""
    values = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            values[parts[0]] = int(parts[1])
    return next((values[n] for n in names if n in values), 0)


def cgroup_paths(proc_root: str | Path = "/proc") -> dict[str, str]:
    """Controller -> cgroup path of this process (``"0::"`` lines are v2, key ``""``)."""
    text = _read(Path(proc_root) / "self" / "cgroup") or ""
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for ctrl in parts[1].split(",") if parts[1] else [""]:
            out[ctrl] = parts[2]
    return out


def _candidate_dirs(mount: Path, path: str) -> list[Path]:
    """The folders of ``path`` and its ancestors under ``mount``, innermost first; when the
    path is not visible there (a container without a cgroup namespace sees its own cgroup
    at the mount's root), the mount's root alone."""
    rel = path.strip("/")
    full = mount / rel if rel else mount
    if not full.is_dir():
        return [mount] if mount.is_dir() else []
    out = [full]
    cur = full
    while cur != mount:
        cur = cur.parent
        out.append(cur)
    return out


def cgroup_memory(
    proc_root: str | Path = "/proc", sys_root: str | Path = "/sys/fs/cgroup"
) -> CgroupMemory | None:
    """The tightest memory limit over this process's cgroup and its ancestors (v2 and v1),
    with the usage of the cgroup that sets it; None when no limit is set or readable."""
    paths, root = cgroup_paths(proc_root), Path(sys_root)
    best: CgroupMemory | None = None

    def consider(limit: int | None, usage: int | None, source: Path, cache: int) -> None:
        nonlocal best
        if limit is None or limit >= UNLIMITED:
            return
        usage = usage or 0
        cand = CgroupMemory(limit, usage, str(source), min(cache, usage))
        if best is None or cand.available < best.available:
            best = cand

    def v2(d: Path) -> None:
        consider(
            _int(d / "memory.max"),
            _int(d / "memory.current"),
            d / "memory.max",
            _stat_value(d, "inactive_file"),
        )

    if "" in paths and (root / "cgroup.controllers").exists():  # v2, unified at sys_root
        for d in _candidate_dirs(root, paths[""]):
            v2(d)
    for mount in (root / "memory", root / "unified"):
        if mount.name == "memory" and "memory" in paths:  # v1
            for d in _candidate_dirs(mount, paths["memory"]):
                consider(
                    _int(d / "memory.limit_in_bytes"),
                    _int(d / "memory.usage_in_bytes"),
                    d / "memory.limit_in_bytes",
                    # total_: the cgroup and its children, as usage_in_bytes counts them
                    _stat_value(d, "total_inactive_file", "inactive_file"),
                )
        elif mount.name == "unified" and "" in paths and (mount / "cgroup.controllers").exists():
            for d in _candidate_dirs(mount, paths[""]):  # hybrid: v2 beside v1
                v2(d)
    return best


def cgroup_cpu_quota(
    proc_root: str | Path = "/proc", sys_root: str | Path = "/sys/fs/cgroup"
) -> tuple[float, str] | None:
    """(CPUs the cgroup quota allows, the file saying so), the tightest over the cgroup
    and its ancestors; None without a quota."""
    paths, root = cgroup_paths(proc_root), Path(sys_root)
    best: tuple[float, str] | None = None

    def consider(quota: float | None, source: Path) -> None:
        nonlocal best
        if quota is not None and quota > 0 and (best is None or quota < best[0]):
            best = (quota, str(source))

    def v2(d: Path) -> float | None:
        text = _read(d / "cpu.max")
        if not text:
            return None
        parts = text.split()
        if parts[0] == "max":
            return None
        try:
            period = int(parts[1]) if len(parts) > 1 else 100000
            return int(parts[0]) / period if period > 0 else None
        except ValueError:
            return None

    if "" in paths:
        for mount in (root, root / "unified"):
            if (mount / "cgroup.controllers").exists():
                for d in _candidate_dirs(mount, paths[""]):
                    consider(v2(d), d / "cpu.max")
    mounts = [root / m for m in ("cpu", "cpu,cpuacct", "cpuacct,cpu") if (root / m).is_dir()]
    if "cpu" in paths and mounts:  # v1
        for d in _candidate_dirs(mounts[0], paths["cpu"]):
            quota, period = _int(d / "cpu.cfs_quota_us"), _int(d / "cpu.cfs_period_us")
            if quota is not None and quota > 0 and period:
                consider(quota / period, d / "cpu.cfs_quota_us")
    return best


def affinity_cpus() -> int:
    """CPUs of this process's affinity mask (``taskset``, Slurm's binding), else all."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except (AttributeError, OSError):
        return max(os.cpu_count() or 1, 1)


def usable_cpus(proc_root: str | Path = "/proc", sys_root: str | Path = "/sys/fs/cgroup") -> int:
    """The CPUs this process may use: its affinity mask, capped by the cgroup CPU quota
    (rounded up: a quota of 1.5 CPUs runs 2 threads)."""
    return usable_cpus_explained(proc_root, sys_root)[0]


def usable_cpus_explained(
    proc_root: str | Path = "/proc", sys_root: str | Path = "/sys/fs/cgroup"
) -> tuple[int, str]:
    """(usable CPUs, why: "2 CPUs in the affinity mask", "... capped by the cgroup CPU
    quota of 1.00 CPU (/sys/fs/cgroup/cpu.max)")."""
    n = affinity_cpus()
    total = os.cpu_count() or n
    why = f"{n} CPU(s) in the affinity mask" + (f" (of {total})" if n != total else "")
    quota = cgroup_cpu_quota(proc_root, sys_root)
    if quota is not None and math.ceil(quota[0]) < n:
        n = max(math.ceil(quota[0]), 1)
        why += f", capped by the cgroup CPU quota of {quota[0]:.2f} CPU ({quota[1]})"
    return n, why


_flags: frozenset[str] | None = None


def cpu_flags(proc_root: str | Path = "/proc") -> frozenset[str]:
    """The first CPU's feature flags in ``/proc/cpuinfo`` (empty where unreadable); read
    once per process for the real ``/proc``."""
    global _flags
    real = str(proc_root) == "/proc"
    if real and _flags is not None:
        return _flags
    text = _read(Path(proc_root) / "cpuinfo") or ""
    found: frozenset[str] = frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            found = frozenset(line.split(":", 1)[1].split())
            break
    if real:
        _flags = found
    return found


_caches: dict[int, int] | None = None


def cache_bytes(level: int, sys_root: str | Path = "/sys/devices/system/cpu") -> int | None:
    """The size in bytes of the first CPU's data or unified cache at ``level`` (1, 2, 3),
    or of its last level for ``level=0``; None where sysfs does not say. Read once per
    process for the real ``/sys``."""
    global _caches
    real = str(sys_root) == "/sys/devices/system/cpu"
    sizes = _caches if real else None
    if sizes is None:
        sizes = {}
        for index in sorted((Path(sys_root) / "cpu0" / "cache").glob("index*")):
            kind = _read(index / "type") or ""
            lvl, size = _read(index / "level"), _read(index / "size") or ""
            if kind == "Instruction" or not lvl or not lvl.isdigit():
                continue
            scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1:].upper(), 1)
            digits = size.rstrip("KMGkmg")
            if digits.isdigit():
                sizes[int(lvl)] = int(digits) * scale
        if real:
            _caches = sizes
    if level == 0:
        return sizes[max(sizes)] if sizes else None
    return sizes.get(level)
