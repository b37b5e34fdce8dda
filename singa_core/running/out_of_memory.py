"""Running out of memory during a step: a located error instead of a traceback.

A GPU's memory is allocated as layers run (CuPy's pool grows), so a job that fit the
dry-run's estimate can still run out — of the GPU's memory (CuPy's ``OutOfMemoryError``,
a ``MemoryError``) or of the host's. :func:`out_of_memory_error` turns the exception into a
SingaError naming the layer that was computing (found on the traceback), its device, the
batch size and the step; the job then stops as after any error (exit 2), and the caller
names the newest checkpoint, which is intact.
"""

from __future__ import annotations

from singa_core.contracts.errors import SingaError
from singa_core.contracts.layer import Layer


def failing_layer(exc: BaseException) -> Layer | None:
    """The innermost Layer whose method was running when ``exc`` was raised."""
    found = None
    tb = exc.__traceback__
    while tb is not None:
        obj = tb.tb_frame.f_locals.get("self")
        if isinstance(obj, Layer):
            found = obj
        tb = tb.tb_next
    return found


def out_of_memory_error(exc: MemoryError, step: int, where=None) -> SingaError:
    layer = failing_layer(exc)
    what = str(exc).strip() or type(exc).__name__
    if layer is None:
        head = f"out of memory in step {step}"
        device = "the host"
    else:
        device = str(layer.device)
        batch = layer.data.shape[0] if getattr(layer, "data", None) is not None else None
        head = (
            f"out of memory on {device} in step {step}, in layer '{layer.name}' "
            f"({type(layer).__name__}" + (f", batch of {batch}" if batch is not None else "") + ")"
        )
        where = layer.ctx.locate(None) or where
    return SingaError(
        f"{head}: {what}",
        where=where,
        help="reduce the batchsize (store_conf.batchsize) or the layer's size, put fewer "
        "workers on this device, or run on the CPU with --device cpu; then continue with "
        "`singa train --resume`",
    )
