"""Helpers shared by the built-in param generators."""

from __future__ import annotations

import numpy as np

from singa_core.errors import SingaError

DTYPE = np.float32


def scratch_for(value: np.ndarray) -> np.ndarray:
    """``value`` itself when random numbers can be drawn straight into it, else a new buffer."""
    if value.dtype == DTYPE and value.flags.c_contiguous and value.flags.writeable:
        return value
    return np.empty(value.shape, dtype=DTYPE)


def finish(out: np.ndarray, value: np.ndarray) -> None:
    """Copy ``out`` into ``value`` if they are different arrays."""
    if out is not value:
        value[...] = out


def require_matrix(method: str, value: np.ndarray, fallback: str) -> tuple[int, int]:
    """``(fan_out, fan_in) = value.shape`` for a 2-D param; a SingaError otherwise.

    SINGA stores weight matrices as ``(out, in)``, so ``fan_in`` is the number of columns.
    """
    if value.ndim != 2:
        raise SingaError(
            f"init method {method} needs a 2-D param (out, in) to compute its fan-in, "
            f"but this param has shape {tuple(value.shape)}",
            help=f"use `type: {fallback}` in this param's init for params that are not "
            "weight matrices (e.g. biases or conv kernels stored with more dimensions)",
        )
    return int(value.shape[0]), int(value.shape[1])
