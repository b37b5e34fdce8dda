"""Checkpoints of a Ray job, written from where the values live.

Group 0 worker 0 decides when (the TrainingLoop's ``checkpoint_freq``, the last step, a
stop), waits until its group's servers hold that step's values, and sends the driver the
training state without the Params (layer states, seed, meta). The driver then takes the
values, versions and updater state of server group 0 straight from its servers (one
``snapshot`` call per server: the bytes go from the servers' nodes to the driver's node,
nothing when they are the same, never through a worker) and writes the checkpoint in its
workspace with :func:`singa_core.running.checkpoint.write_checkpoint`.
"""

from __future__ import annotations

import numpy as np

from singa_core.running import checkpoint as ckpt


def records_from_snapshots(layout, state_names, snaps: dict) -> tuple[list, dict]:
    """The checkpoint's ParamRecords and updater-state arrays from the servers' snapshots
    (slice id -> (version, value, {state name: array}))."""
    records, arrays = [], {}
    for pid in layout.order:
        info = layout.params[pid]
        sids = layout.param_slices[pid]
        value = np.concatenate([snaps[s][1] for s in sids]) if sids else np.zeros(0, "f4")
        version = min((snaps[s][0] for s in sids), default=0)
        records.append(ckpt.ParamRecord(info.name, version, value.reshape(info.shape)))
        if info.learnable:
            for name in state_names:
                block = np.concatenate([snaps[s][2][name] for s in sids])
                arrays[f"{info.name}::{name}"] = block.reshape(info.shape)
    return records, arrays
