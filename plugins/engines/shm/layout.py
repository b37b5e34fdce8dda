"""Where every owner Param and every slice lives in the flat shared-memory arrays (§4.1).

Owner Params are laid out one after another in param-id order (the net gives every process
the same ids), so a Param is one contiguous range ``[offset, offset + size)`` of a flat
float32 array and each of its slices a contiguous sub-range. ``num = lcm(nservers_per_group,
nserver_groups)`` boxes are cut by 0.3's Slice; slice → server (within a server group) and
slice → master server group come from PartitionSlices.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from singa_core.names import runtime_param_name
from singa_core.netbuilder.slicing import partition_slices, slice_params


@dataclass(frozen=True)
class ParamInfo:
    id: int
    name: str  # runtime name for checkpoints ("0#w1")
    shape: tuple[int, ...]
    offset: int
    size: int
    learnable: bool
    lr_scale: float
    wd_scale: float
    num_total: int  # gradients a worker group sends per update


@dataclass(frozen=True)
class SliceInfo:
    id: int
    param: int  # owner param id
    start: int  # offset in the param
    size: int
    offset: int  # offset in the flat array
    server: int  # server id within a server group
    master: int  # server group holding the master copy (inter-group sync)


class ParamLayout:
    def __init__(self, params: list[ParamInfo], nservers_per_group: int, nserver_groups: int):
        self.params = {p.id: p for p in params}
        self.order = [p.id for p in params]
        self.total = sum(p.size for p in params)
        self.num = math.lcm(nservers_per_group, nserver_groups)
        pieces = slice_params(self.num, [p.size for p in params])
        sizes = [s for ps in pieces for s in ps]
        to_server = partition_slices(nservers_per_group, sizes)
        to_group = partition_slices(nserver_groups, sizes)
        self.slices: list[SliceInfo] = []
        self.param_slices: dict[int, list[int]] = {}
        for p, ps in zip(params, pieces, strict=True):
            start = 0
            for size in ps:
                sid = len(self.slices)
                self.slices.append(
                    SliceInfo(
                        sid, p.id, start, size, p.offset + start, to_server[sid], to_group[sid]
                    )
                )
                self.param_slices.setdefault(p.id, []).append(sid)
                start += size
            if p.size == 0:
                self.param_slices.setdefault(p.id, [])

    @classmethod
    def from_net(cls, net, nservers_per_group: int, nserver_groups: int) -> ParamLayout:
        """From the full train net (partitioned with nworkers_per_group partitions)."""
        counts = net.contributions()
        infos, offset = [], 0
        for p in net.owner_params:
            infos.append(
                ParamInfo(
                    p.id,
                    runtime_param_name(p.name),
                    tuple(p.shape),
                    offset,
                    p.size,
                    bool(p.learnable),
                    p.lr_scale,
                    p.wd_scale,
                    counts.get(p.id, 0),
                )
            )
            offset += p.size
        return cls(infos, nservers_per_group, nserver_groups)

    def slices_of_server(self, server: int) -> list[SliceInfo]:
        return [s for s in self.slices if s.server == server]
