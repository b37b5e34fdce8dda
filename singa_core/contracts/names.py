"""How the net builder names the layers and Params it generates.

* an unrolled copy of a recurrent layer (SINGA 0.3 §4 step 3): ``"3#gru"``, copy 3 of
  layer ``gru``; Params of a net without unrolling get SINGA's runtime prefix ``0#``;
* a replica of a layer partitioned across the workers of a group (§4 steps 6-7):
  ``"ip1@1"``, replica 1 of ``ip1``; replica 0 keeps the name.

A layer sees these names (``self.name``) and its Params' names follow them; checkpoints,
engines and workers (BPTT) read them back with the ``split_*`` functions here.
"""

from __future__ import annotations

import re

_PREFIX = re.compile(r"^(\d+)#")
_SUFFIX = re.compile(r"@(\d+)$")


def replica_name(name: str, index: int) -> str:
    return f"{name}@{index}"


def split_replica_name(name: str) -> tuple[int | None, str]:
    """``"ip1@1"`` -> ``(1, "ip1")``; a name without a partition -> ``(None, name)``."""
    m = _SUFFIX.search(name)
    if m is None:
        return None, name
    return int(m.group(1)), name[: m.start()]


def replica_param_name(name: str, index: int) -> str:
    """Replica 0 keeps a Param's name; replica i ≥ 1 adds ``@i``."""
    return name if index == 0 else f"{name}@{index}"


def unrolled_name(index: int, name: str) -> str:
    return f"{index}#{name}"


def split_unrolled_name(name: str) -> tuple[int | None, str]:
    """``"3#gru"`` -> ``(3, "gru")``; a name without an index -> ``(None, name)``."""
    m = _PREFIX.match(name)
    if m is None:
        return None, name
    return int(m.group(1)), name[m.end() :]


def base_layer_name(name: str) -> str:
    """The configured name of an unrolled copy (``"3#gru"`` -> ``"gru"``)."""
    return split_unrolled_name(name)[1]


def runtime_param_name(name: str) -> str:
    """SINGA's runtime name of a Param of an un-unrolled layer (used in checkpoints)."""
    return name if "#" in name else f"0#{name}"


def plain_param_name(name: str) -> str:
    return name.split("#", 1)[1] if "#" in name else name
