"""A layer of the net before it is created, as the net builder and its graph transforms
(unrolling, partitioning) pass it along: its LayerProto, where it came from in the
job.conf, its sources."""

from __future__ import annotations

from dataclasses import dataclass, field

from singa_core.plugin_host.registry import type_selection
from singa_core.schema import job_pb2


@dataclass
class LayerSpec:
    """A layer of the net before it is created: its conf and where it came from."""

    conf: job_pb2.LayerProto
    conf_index: int | None  # index in the user's neuralnet.layer list, None if inserted
    srcs: list[str] = field(default_factory=list)
    # source position -> the part of a multi-output source (kSlice) this layer reads
    src_parts: dict[int, int] = field(default_factory=dict)


def layer_type_name(conf) -> str:
    """The registry key of a layer: ``user_type`` if given (a UserTypeName, looked up among
    the user types first), else the LayerType name (among the built-in enum types)."""
    return type_selection(conf, "type", "user_type")


def spec_location(locate, spec: LayerSpec, fieldname: str | None = None):
    """Where ``spec``'s field (its name by default) is in the job.conf; the job's location
    for a layer the builder inserted."""
    if spec.conf_index is None:
        return locate(None)
    base = f"neuralnet.layer[{spec.conf_index}]"
    return locate(f"{base}.{fieldname}" if fieldname else f"{base}.name")
