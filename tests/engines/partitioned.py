"""What the engines' model-partitioning tests share: ip1 of the small MLP split on its
outputs (partition_dim 1) between the 2 workers of a group, started from the whole net's
initial values, must end where the whole net ends."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from singa_core.running.checkpoint import ParamRecord, encode_params, read_params

SPLIT = ("0#w1", "0#b1")  # ip1's Params: halves w1/b1 (partition 0) and w1@1/b1@1
COMMON = ("neuralnet.layer[0].store_conf.random_skip=0", "test_steps=0")
PARTITIONED = ("cluster.nworkers_per_group=2", "neuralnet.layer[1].partition_dim=1")


def final_params(ws: Path, step: int) -> dict[str, np.ndarray]:
    return {r.name: r.value for r in read_params(ws / "checkpoint" / f"step{step}-worker0")}


def split_start(whole_ws: Path, out: Path) -> Path:
    """The whole net's step-0 checkpoint cut into the partitions' Params (for
    checkpoint_path)."""
    records = []
    for name, value in final_params(whole_ws, 0).items():
        if name in SPLIT:
            first, second = np.split(value, 2, axis=0)
            records += [ParamRecord(name, 0, first), ParamRecord(name + "@1", 0, second)]
        else:
            records.append(ParamRecord(name, 0, value))
    out.write_bytes(encode_params(records))
    return out


def assert_equals_the_whole_net(whole: dict, parts: dict) -> None:
    for name in SPLIT:
        joined = np.concatenate([parts[name], parts[name + "@1"]], axis=0)
        np.testing.assert_allclose(joined, whole[name], rtol=2e-5, atol=2e-6, err_msg=name)
    for name in ("0#w2", "0#b2"):
        np.testing.assert_allclose(parts[name], whole[name], rtol=2e-5, atol=2e-6, err_msg=name)
