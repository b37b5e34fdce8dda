"""The devices a plugin's checks run on: the CPU, the stand-in device (the CPU behind
CuPy's rules: a layer that falls back to numpy fails there as it would on a GPU) and every
CUDA device this machine can use.

    @pytest.mark.parametrize("device", check_devices(), ids=str)
    def test_contract(device):
        check_layer("kFoo", CONF, [x], device=device)

On a machine without a GPU the CUDA entries are simply absent (:func:`gpu_skip_reason` says
why, for tests that need one).
"""

from __future__ import annotations

from singa_core.contracts.device import CPU, Device, open_device, standin_device
from singa_core.contracts.errors import SingaError


def cuda_devices() -> list[Device]:
    """Every CUDA device that opens (CuPy installed, a driver, a kernel runs)."""
    found = []
    try:
        first = open_device("cuda:0", where="check_devices")
    except SingaError:
        return []
    found.append(first)
    count = int(first.xp.cuda.runtime.getDeviceCount())
    for i in range(1, count):
        try:
            found.append(open_device(f"cuda:{i}", where="check_devices"))
        except SingaError:
            continue
    return found


def gpu_skip_reason() -> str | None:
    """Why no GPU check can run here (None: cuda:0 is usable)."""
    try:
        open_device("cuda:0", where="check_devices")
    except SingaError as err:
        return f"needs a CUDA GPU: {err.message}"
    return None


def check_devices() -> list[Device]:
    """The CPU, the stand-in and the usable CUDA devices (see the module doc)."""
    return [CPU, standin_device(), *cuda_devices()]
