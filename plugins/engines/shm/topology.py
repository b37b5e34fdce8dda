"""Process layout from ClusterProto (SINGA 0.3 §1.8, §5.1).

Worker ``(g, j)`` lives in worker process ``(g·nworkers_per_group + j) // nworkers_per_procs``;
server ``(g, j)`` in server process ``(g·nservers_per_group + j) // nservers_per_procs``.
With ``server_worker_separate`` the server processes come after the worker processes;
otherwise worker process ``i`` and server process ``i`` are the same OS process (0.3 ran
them as threads of one process), so there are ``max(#worker procs, #server procs)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from singa_core.errors import SingaError


@dataclass(frozen=True)
class ProcSpec:
    index: int
    workers: tuple[tuple[int, int], ...]  # (group, id within group)
    servers: tuple[tuple[int, int], ...]  # (server group, id within server group)

    def role(self) -> str:
        """E.g. "worker process 1 (group 0, workers 1)" (for messages and --dry-run)."""
        parts = []
        if self.workers:
            parts.append(_members("group", "workers", self.workers))
        if self.servers:
            parts.append(_members("server group", "servers", self.servers))
        kind = (
            "worker+server"
            if self.workers and self.servers
            else ("worker" if self.workers else "server")
        )
        return f"{kind} process {self.index} ({'; '.join(parts)})"


def _members(group_word: str, member_word: str, members) -> str:
    by_group: dict[int, list[int]] = {}
    for g, j in members:
        by_group.setdefault(g, []).append(j)
    return "; ".join(
        f"{group_word} {g}, {member_word} {','.join(map(str, ids))}" for g, ids in by_group.items()
    )


@dataclass
class Topology:
    nworker_groups: int
    nworkers_per_group: int
    nserver_groups: int
    nservers_per_group: int
    nworkers_per_procs: int
    nservers_per_procs: int
    separate: bool
    sync_freq: int
    share_memory: bool
    procs: list[ProcSpec] = field(default_factory=list)

    @property
    def nworkers(self) -> int:
        return self.nworker_groups * self.nworkers_per_group

    @property
    def nservers(self) -> int:
        return self.nserver_groups * self.nservers_per_group

    def worker_index(self, g: int, j: int) -> int:
        return g * self.nworkers_per_group + j

    def server_index(self, sg: int, j: int) -> int:
        return sg * self.nservers_per_group + j

    def server_group_of(self, g: int) -> int:
        """0.3: svr_grp = grp / (nworker_groups / nserver_groups)."""
        return g // (self.nworker_groups // self.nserver_groups)


def _check(cond: bool, msg: str, field_name: str, locate, help_text: str) -> None:
    if not cond:
        raise SingaError(msg, where=locate(f"cluster.{field_name}"), help=help_text)


def build_topology(cluster, locate=lambda path=None: None) -> Topology:
    c = cluster
    for name in (
        "nworker_groups",
        "nserver_groups",
        "nworkers_per_group",
        "nservers_per_group",
        "nworkers_per_procs",
        "nservers_per_procs",
        "sync_freq",
    ):
        v = getattr(c, name)
        _check(
            v >= 1,
            f"cluster.{name} is {v}; it must be at least 1",
            name,
            locate,
            f"set {name}: 1 or more",
        )
    wpg, wpp = c.nworkers_per_group, c.nworkers_per_procs
    spg, spp = c.nservers_per_group, c.nservers_per_procs
    _check(
        c.nworker_groups % c.nserver_groups == 0,
        f"nworker_groups ({c.nworker_groups}) is not a multiple of nserver_groups "
        f"({c.nserver_groups})",
        "nserver_groups",
        locate,
        "every server group serves the same number of worker groups; e.g. nserver_groups: 1",
    )
    _check(
        wpg % wpp == 0 or (wpp % wpg == 0 and (c.nworker_groups * wpg) % wpp == 0),
        f"nworkers_per_group ({wpg}) is not divisible by nworkers_per_procs ({wpp}) "
        "(and a process cannot hold a whole number of groups either)",
        "nworkers_per_procs",
        locate,
        "a process holds either part of one group (nworkers_per_group a multiple of "
        "nworkers_per_procs) or whole groups (nworkers_per_procs a multiple of "
        "nworkers_per_group dividing the number of workers)",
    )
    _check(
        spg % spp == 0 or (spp % spg == 0 and (c.nserver_groups * spg) % spp == 0),
        f"nservers_per_group ({spg}) is not divisible by nservers_per_procs ({spp}) "
        "(and a process cannot hold a whole number of server groups either)",
        "nservers_per_procs",
        locate,
        "set nservers_per_procs to a divisor of nservers_per_group (e.g. 1)",
    )
    topo = Topology(
        c.nworker_groups,
        wpg,
        c.nserver_groups,
        spg,
        wpp,
        spp,
        bool(c.server_worker_separate),
        c.sync_freq,
        bool(c.share_memory),
    )
    nwp = topo.nworkers // wpp
    nsp = topo.nservers // spp
    workers: dict[int, list] = {}
    servers: dict[int, list] = {}
    for g in range(topo.nworker_groups):
        for j in range(wpg):
            workers.setdefault(topo.worker_index(g, j) // wpp, []).append((g, j))
    offset = nwp if topo.separate else 0
    for sg in range(topo.nserver_groups):
        for j in range(spg):
            servers.setdefault(offset + topo.server_index(sg, j) // spp, []).append((sg, j))
    nprocs = nwp + nsp if topo.separate else max(nwp, nsp)
    topo.procs = [
        ProcSpec(i, tuple(workers.get(i, ())), tuple(servers.get(i, ()))) for i in range(nprocs)
    ]
    return topo
