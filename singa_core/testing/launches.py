"""What a training step asks of a GPU, counted on the stand-in device (no GPU needed).

Every call into the stand-in array module that does device work is a kernel launch on a
GPU; every read of a device value on the host is a synchronisation that stops the host from
running ahead; every host array sent to the device is a copy
(:func:`singa_core.contracts.standin.counting`). On a GPU a step costs about a fixed time
per launch and per read, whatever the arrays' sizes at these batch sizes, so these counts
predict the step's time where no GPU can be had and explain it where one can.

:func:`count_training_steps` runs a job's real training loop on the stand-in twice, for two
numbers of steps with only step 0 displayed, and gives the difference per step: set-up, the
first display, the final evaluation and the checkpoint cancel out, so what is left is one
undisplayed step. A displayed step's extra cost (reading the metrics) is counted apart.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from singa_core.contracts import standin
from singa_core.contracts.device import standin_device


@dataclass(frozen=True)
class StepCounts:
    """Per training step on the stand-in (the averages of whole runs' differences)."""

    kernels: float
    views: float
    reads: float
    to_device: float
    #: the extra of a displayed step over an undisplayed one
    display_kernels: float
    display_reads: float
    #: per-step kernels by name (``kernels:add`` …), for finding where they come from
    by_name: dict[str, float]


def _run(conf: Path | str, overrides: list[str], steps: int, disp_freq: int) -> standin.Counts:
    from singa_core.jobconf.parse import load_job
    from singa_core.plugin_host.host import get_host
    from singa_core.running.job import prepare_job
    from singa_core.running.reporting import Reporter

    ws = tempfile.mkdtemp(prefix="singa-count-")
    cfg = load_job(
        Path(conf),
        [
            *overrides,
            f"cluster.workspace={ws}",
            f"train_steps={steps}",
            f"disp_freq={disp_freq}",
            "disp_after=0",
            "test_steps=0",
            "test_freq=0",
            "validate_freq=0",
            "checkpoint_freq=0",
            "num_openblas_threads=1",
        ],
    )
    host = get_host()
    prepared = prepare_job(cfg, host, seed=0, device=standin_device().name)
    engine = host.get("engine", "inprocess")(prepared, Reporter(quiet=True))
    with standin.counting() as counts:
        engine.train()
    return counts


def count_training_steps(
    conf: Path | str, overrides: list[str] = (), *, short: int = 2, long: int = 7
) -> StepCounts:
    """Per-step counts of ``conf``'s training on the stand-in (see the module doc);
    ``overrides`` are ``-o`` FIELD=VALUE texts (e.g. the stores' paths)."""
    overrides = list(overrides)
    n = long - short
    few = _run(conf, overrides, short, 10**6)
    many = _run(conf, overrides, long, 10**6)
    shown = _run(conf, overrides, long, 1)

    def per(a, b, k):
        return (getattr(b, k) - getattr(a, k)) / n

    names = {
        name: (many.by_name[name] - few.by_name.get(name, 0)) / n
        for name in many.by_name
        if many.by_name[name] != few.by_name.get(name, 0)
    }
    return StepCounts(
        kernels=per(few, many, "kernels"),
        views=per(few, many, "views"),
        reads=per(few, many, "reads"),
        to_device=per(few, many, "to_device"),
        display_kernels=(shown.kernels - many.kernels) / (long - 1),
        display_reads=(shown.reads - many.reads) / (long - 1),
        by_name=dict(sorted(names.items(), key=lambda kv: -kv[1])),
    )
