"""What a failing CUDA call means for the user, in place of CuPy's words.

CuPy reports the CUDA runtime's error names and texts (``cudaErrorInsufficientDriver: CUDA
driver version is insufficient for CUDA runtime version``). Some of them mislead: on a
machine with no NVIDIA driver at all, the runtime reports an *insufficient* driver, which
sends a user to upgrade a driver that does not exist. :func:`explain_cuda_failure` looks at
the error and at the machine (is an NVIDIA driver loaded? which version?) and says what the
user can do; ``device._open_cuda`` raises it as a located :class:`SingaError`.
"""

from __future__ import annotations

import ctypes
import os
import re

#: the NVIDIA kernel module's version file (present where the driver is loaded, containers
#: with a GPU passed through included)
NVIDIA_PROC = "/proc/driver/nvidia/version"
#: the driver's user-space library that the CUDA runtime opens
LIBCUDA = "libcuda.so.1"

NO_DRIVER_HELP = (
    "this machine cannot run CUDA: run on the CPU (--device cpu, or leave job.conf's gpu "
    "field out); on a machine with an NVIDIA GPU, install its driver first (nvidia-smi must "
    "list the GPU)"
)

_NAME = re.compile(r"cudaError\w+")
# the CUDA runtime's codes of the errors translated below (cuda_runtime_api.h)
_CODES = {
    3: "cudaErrorInitializationError",
    35: "cudaErrorInsufficientDriver",
    46: "cudaErrorDevicesUnavailable",
    100: "cudaErrorNoDevice",
    803: "cudaErrorSystemDriverMismatch",
    804: "cudaErrorCompatNotSupportedOnDevice",
}


def driver_loaded() -> bool:
    """Whether an NVIDIA driver is there: its kernel module's version file, or its user
    library can be opened."""
    if os.path.exists(NVIDIA_PROC):
        return True
    try:
        ctypes.CDLL(LIBCUDA)
    except OSError:
        return False
    return True


def driver_version() -> str | None:
    """The loaded NVIDIA kernel module's version (``535.104.05``), if it says."""
    try:
        with open(NVIDIA_PROC, encoding="utf-8", errors="replace") as fh:
            first = fh.readline()
    except OSError:
        return None
    m = re.search(r"Kernel Module\s+(\S+)", first) or re.search(r"\b(\d+\.\d+(?:\.\d+)?)\b", first)
    return m.group(1) if m else None


def error_name(exc: BaseException) -> str | None:
    """The CUDA runtime's name of the error CuPy raised (``cudaErrorNoDevice``), if known."""
    status = getattr(exc, "status", None)
    if isinstance(status, int) and status in _CODES:
        return _CODES[status]
    m = _NAME.search(str(exc))
    return m.group(0) if m else None


def explain_cuda_failure(
    exc: BaseException, what: str = "no CUDA device can be used"
) -> tuple[str, str]:
    """(message, help) for an exception of CuPy's first CUDA call on this machine.

    The message says what is wrong in the user's terms, without quoting CuPy where its text
    misleads; the help says what to do."""
    name = error_name(exc)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if name in ("cudaErrorInsufficientDriver", "cudaErrorNoDevice") and not driver_loaded():
        return f"{what}: this machine has no NVIDIA driver", NO_DRIVER_HELP
    if name == "cudaErrorInsufficientDriver":
        version = driver_version()
        have = f"the NVIDIA driver {version}" if version else "the NVIDIA driver"
        return (
            f"{what}: {have} is older than the CUDA version CuPy was built for",
            "update the NVIDIA driver, or install the CuPy build for the CUDA version "
            "nvidia-smi shows (cupy-cuda11x, cupy-cuda12x); or run on the CPU: --device cpu",
        )
    if name == "cudaErrorNoDevice":
        if visible is not None:
            return (
                f"{what}: CUDA_VISIBLE_DEVICES={visible!r} hides every GPU",
                "unset CUDA_VISIBLE_DEVICES or list the GPUs to use (nvidia-smi -L); or run "
                "on the CPU: --device cpu",
            )
        return (
            f"{what}: the NVIDIA driver is loaded but finds no GPU",
            "check that the GPU is seen (nvidia-smi -L) and, in a container, passed to it "
            "(e.g. docker run --gpus all); or run on the CPU: --device cpu",
        )
    if name == "cudaErrorDevicesUnavailable":
        return (
            f"{what}: every GPU is busy (in exclusive-process mode, held by another process)",
            "nvidia-smi shows the processes holding the GPUs; wait for them, or run on the "
            "CPU: --device cpu",
        )
    if name in (
        "cudaErrorSystemDriverMismatch",
        "cudaErrorCompatNotSupportedOnDevice",
        "cudaErrorInitializationError",
    ):
        return (
            f"{what}: the NVIDIA driver's kernel module and its library do not match ({name})",
            "after a driver update the machine needs a reboot (or the module reloaded); "
            "nvidia-smi must work; or run on the CPU: --device cpu",
        )
    text = f"{type(exc).__name__}: {exc}".strip()
    return (
        f"{what}: {text}",
        "check that nvidia-smi lists the GPU and that CuPy matches the CUDA version it "
        "shows; or run on the CPU: --device cpu",
    )
