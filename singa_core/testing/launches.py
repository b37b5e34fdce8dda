"""What a GPU is asked to do, counted on the CPU: launches, reads and copies, observed.

On the ``standin:cuda`` device every kernel runs its CUDA code through the emulated
runtime, so a launch is counted where the runtime launches it (a raw kernel, a cuBLAS
GEMM), a device read where the host reads a device value (each a synchronisation that
stops the host from running ahead), and a copy where host data goes to the device; array
calls outside the kernels (numpy's functions on device arrays) are counted as the
launches they are on a GPU. On a GPU a step costs about a fixed time per launch and per
read at these batch sizes, so these counts predict the step's time where no GPU can be
had and explain it where one can.

* :func:`count_launches`: a block's counts (a layer's forward, an updater's step);
* :func:`count_training_steps`: a whole job.conf's training step, through the same path as
  ``singa train`` (plugins loaded first, so a job.conf using a plugin's extension fields
  counts too). The job trains twice, for two numbers of steps with only step 0 displayed,
  and the difference per step is given: set-up, the first display, the final evaluation
  and the checkpoint cancel out. A displayed step's extra cost (reading the metrics) is
  counted apart.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from singa_core.contracts import standin

#: what :func:`count_launches` yields (``kernels``, ``reads``, ``to_device``, ``views``,
#: ``allocations`` and ``by_name``)
Counts = standin.Counts

#: the device the counts are observed on
COUNTING_DEVICE = "standin:cuda"


@contextlib.contextmanager
def count_launches() -> Iterator[Counts]:
    """Count what the stand-in devices are asked inside the block (any thread)::

        with count_launches() as c:
            layer.forward(phase, srcs)
        assert (c.kernels, c.reads) == (1, 0)

    On ``standin:cuda`` (:func:`singa_core.testing.emulated_cuda_device`) the kernels
    are the launches the CUDA code makes; on the plain ``standin`` they are what each
    kernel declares (``launches=``)."""
    with standin.counting() as counts:
        yield counts


@dataclass(frozen=True)
class StepCounts:
    """Per training step (the averages of whole runs' differences)."""

    kernels: float
    views: float
    reads: float
    to_device: float
    #: the extra of a displayed step over an undisplayed one
    display_kernels: float
    display_reads: float
    #: per-step kernels by name (``kernels:singa_sgd_update`` …), to find where they come from
    by_name: dict[str, float]


def _run(conf, overrides, steps: int, disp_freq: int, device: str) -> Counts:
    import io

    from singa_core.api.job import Job

    ws = tempfile.mkdtemp(prefix="singa-count-")
    settings = {
        "train_steps": steps,
        "disp_freq": disp_freq,
        "disp_after": 0,
        "test_steps": 0,
        "test_freq": 0,
        "validate_freq": 0,
        "checkpoint_freq": 0,
        "num_openblas_threads": 1,
    }
    job = Job.from_file(
        conf,
        [*overrides, *(f"{k}={v}" for k, v in settings.items())],
        seed=0,
        workspace=ws,
        device=device,
        quiet=True,
        live=False,
        err=io.StringIO(),  # the run's first lines: counting prints nothing
    )
    if device == COUNTING_DEVICE:
        from singa_core.contracts.cuda import emulated

        emulated().forget_tables()  # each run uploads its own, as a new process does
    with count_launches() as counts:
        job.train()
    return counts


def count_training_steps(
    conf: Path | str,
    overrides: list[str] = (),
    *,
    device: str = COUNTING_DEVICE,
    short: int = 2,
    long: int = 7,
) -> StepCounts:
    """Per-step counts of ``conf``'s training (see the module doc); ``overrides`` are
    ``-o`` FIELD=VALUE texts (e.g. the stores' paths). ``device="standin"`` counts what
    the kernels declare instead of what their CUDA code launches."""
    overrides = list(overrides)
    n = long - short
    few = _run(conf, overrides, short, 10**6, device)
    many = _run(conf, overrides, long, 10**6, device)
    shown = _run(conf, overrides, long, 1, device)

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
