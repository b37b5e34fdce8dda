"""The plugin author's kit: checks a plugin's own test suite calls, one line per type.

Installed with singa-classic (``from singa_core.testing import ...``); its pytest plugin
(:mod:`singa_core.testing.pytest_plugin`, registered as a ``pytest11`` entry point) offers
the same as fixtures. The built-in plugins' tests use this kit too. See CONTRIBUTING.md,
"Testing a plugin".

* devices: :func:`check_devices` (the CPU, the stand-in device and every usable GPU: run a
  layer's checks on each with ``check_layer(..., device=d)``), :func:`gpu_skip_reason`;
* layers: :func:`check_layer` (set-up shapes, gradients against central differences on
  plain and strided sources, ``kAggGrad``, Param checkpoint round trip, determinism), and
  the pieces it is made of: :class:`GradientChecker`, :class:`SourceLayer`, :func:`build`;
* updaters: :func:`check_updater` (state snapshot/restore, clipping and coupled or
  decoupled weight decay through the documented helpers, in-place updates, and the
  update kernel's CUDA code against ``apply``: :func:`check_update_kernel`);
* kernels: :func:`check_kernel` (a kernel's CUDA code run on the CPU against its host
  code, its launches counted), :func:`emulated_cuda_device` (``standin:cuda``);
* what a GPU is asked: :func:`count_launches` (a block), :func:`count_training_steps`
  (a job.conf's training step, plugins' fields included);
* workers: :func:`check_worker` with its :class:`RecordingStub` (collect before use, each
  gradient sent once);
* whole jobs: :func:`run_job` (a job.conf text trained in a temporary workspace: metrics
  and checkpoints), :func:`blobs_csv` and :func:`mlp_job` for a small real job.
"""

from singa_core.testing.devices import check_devices, cuda_devices, gpu_skip_reason
from singa_core.testing.export import ExportReport, check_onnx_export
from singa_core.testing.gradcheck import (
    CheckReport,
    GradientChecker,
    Mismatch,
    SourceLayer,
    batch_innermost,
    build,
    init_params,
    layer_conf,
    make_ctx,
    peak_bytes,
    strided_source,
)
from singa_core.testing.jobs import JobRun, blobs_csv, mlp_job, run_job
from singa_core.testing.kernels import KernelReport, check_kernel, emulated_cuda_device
from singa_core.testing.launches import StepCounts, count_launches, count_training_steps
from singa_core.testing.layers import GradCase, LayerReport, check_layer, check_layer_contract
from singa_core.testing.updaters import (
    LeastSquares,
    TableLR,
    check_against_reference,
    check_clipping,
    check_in_place_allocation_free,
    check_snapshot_restore,
    check_update_kernel,
    check_updater,
    check_weight_decay,
    updater_conf,
)
from singa_core.testing.workers import RecordingStub, check_worker, expected_bp_order

__all__ = [
    "KernelReport",
    "StepCounts",
    "check_kernel",
    "check_update_kernel",
    "count_launches",
    "count_training_steps",
    "emulated_cuda_device",
    "check_devices",
    "cuda_devices",
    "gpu_skip_reason",
    "ExportReport",
    "check_onnx_export",
    "CheckReport",
    "GradCase",
    "GradientChecker",
    "JobRun",
    "LayerReport",
    "LeastSquares",
    "Mismatch",
    "RecordingStub",
    "SourceLayer",
    "TableLR",
    "batch_innermost",
    "blobs_csv",
    "build",
    "check_against_reference",
    "check_clipping",
    "check_in_place_allocation_free",
    "check_layer",
    "check_layer_contract",
    "check_snapshot_restore",
    "check_updater",
    "check_weight_decay",
    "check_worker",
    "expected_bp_order",
    "init_params",
    "layer_conf",
    "make_ctx",
    "mlp_job",
    "peak_bytes",
    "run_job",
    "strided_source",
    "updater_conf",
]
