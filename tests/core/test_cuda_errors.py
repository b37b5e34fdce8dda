"""CUDA errors in the user's terms (issue 38 point 7): with CuPy installed and no GPU, the
error says the machine has no NVIDIA driver and to run on the CPU; it never quotes CUDA's
"driver version is insufficient", which sends a user to upgrade a driver that does not
exist. CuPy is replaced by a fake module whose runtime fails as the real one does."""

from __future__ import annotations

import sys
import types

import pytest
from typer.testing import CliRunner

from singa_core import device as device_mod
from singa_core.commands.cli import app
from singa_core.contracts import cuda_errors
from singa_core.errors import SingaError

INSUFFICIENT = (
    "cudaErrorInsufficientDriver: CUDA driver version is insufficient for CUDA runtime version"
)


class CUDARuntimeError(RuntimeError):
    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status


def fake_cupy(status: int | None, text: str = "", *, kernel_fails: bool = False):
    """A module shaped like CuPy: getDeviceCount raises CUDARuntimeError(status) (None: one
    device), a kernel launch raises when ``kernel_fails``."""
    runtime = types.SimpleNamespace()

    def count():
        if status is not None:
            raise CUDARuntimeError(status, text)
        return 1

    runtime.getDeviceCount = count
    runtime.driverGetVersion = lambda: 12040
    runtime.runtimeGetVersion = lambda: 12040

    class Dev:
        def __init__(self, i):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False

    def zeros(*a, **k):
        if kernel_fails:
            raise CUDARuntimeError(
                46, "cudaErrorDevicesUnavailable: CUDA-capable device(s) is/are busy or unavailable"
            )
        raise AssertionError("not reached in these tests")

    cuda = types.SimpleNamespace(runtime=runtime, Device=Dev)
    return types.SimpleNamespace(cuda=cuda, zeros=zeros, float32="float32", __name__="cupy")


@pytest.fixture
def cupy_says(monkeypatch):
    def install(status, text="", driver=False, version_file=None, **kw):
        monkeypatch.setitem(sys.modules, "cupy", fake_cupy(status, text, **kw))
        monkeypatch.setattr(cuda_errors, "driver_loaded", lambda: driver)
        monkeypatch.setattr(cuda_errors, "driver_version", lambda: version_file)
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)

    return install


def _error(spec="cuda:0", where="--device") -> SingaError:
    with pytest.raises(SingaError) as info:
        device_mod.open_device(spec, where=where)
    return info.value


def test_no_driver_is_said_so_without_quoting_insufficient(cupy_says):
    cupy_says(35, INSUFFICIENT, driver=False)
    err = _error()
    said = f"{err.message}\n{err.help}".lower()
    assert "insufficient" not in said and "upgrade" not in said and "update" not in said
    assert "no nvidia driver" in said
    assert "--device cpu" in err.help
    assert str(err.where) == "--device"


def test_an_old_driver_is_named_with_its_version(cupy_says):
    cupy_says(35, INSUFFICIENT, driver=True, version_file="470.57.02")
    err = _error()
    assert "the NVIDIA driver 470.57.02 is older than the CUDA version CuPy was built for" in (
        err.message
    )
    assert "update the NVIDIA driver" in err.help and "cupy-cuda12x" in err.help


def test_no_device_with_a_driver(cupy_says, monkeypatch):
    cupy_says(100, "cudaErrorNoDevice: no CUDA-capable device is detected", driver=True)
    assert "finds no GPU" in _error().message
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    err = _error()
    assert "CUDA_VISIBLE_DEVICES=''" in err.message and "unset" in err.help


def test_no_device_without_a_driver(cupy_says):
    cupy_says(100, "cudaErrorNoDevice: no CUDA-capable device is detected", driver=False)
    assert "no NVIDIA driver" in _error().message


def test_a_mismatched_driver_asks_for_a_reboot(cupy_says):
    cupy_says(
        803,
        "cudaErrorSystemDriverMismatch: system has unsupported display driver / cuda driver "
        "combination",
        driver=True,
    )
    err = _error()
    assert "do not match" in err.message and "reboot" in err.help


def test_a_busy_gpu_at_the_first_kernel(cupy_says):
    cupy_says(None, driver=True, kernel_fails=True)
    err = _error("cuda:0")
    assert err.message.startswith("cuda:0 cannot run a kernel: every GPU is busy")
    assert "nvidia-smi" in err.help


def test_an_unknown_error_is_quoted_with_a_way_on(cupy_says):
    cupy_says(999, "cudaErrorUnknown: unknown error", driver=True)
    err = _error()
    assert "cudaErrorUnknown" in err.message and "--device cpu" in err.help


def test_the_status_code_alone_is_enough():
    assert cuda_errors.error_name(CUDARuntimeError(35, "")) == "cudaErrorInsufficientDriver"
    assert cuda_errors.error_name(RuntimeError("cudaErrorNoDevice: x")) == "cudaErrorNoDevice"
    assert cuda_errors.error_name(RuntimeError("other")) is None


def test_train_with_gpu_alias_and_no_driver_is_a_located_exit_2(cupy_says, tmp_path):
    from conftest import mlp_conf, write_csv_blobs

    cupy_says(35, INSUFFICIENT, driver=False)
    conf = tmp_path / "job.conf"
    conf.write_text(mlp_conf(write_csv_blobs(tmp_path / "b.csv"), tmp_path / "ws", steps=2))
    for spec in ("gpu", "cuda", "GPU:0"):  # the aliases of cuda:0
        res = CliRunner().invoke(app, ["train", str(conf), "--device", spec, "-q"])
        assert res.exit_code == 2, res.output
        assert res.output.startswith("--device: error: no CUDA device can be used: "), res.output
        assert "insufficient" not in res.output.lower()
        assert "Traceback" not in res.output


def test_predict_names_the_option_as_train_does(cupy_says, tmp_path):
    """One spelling per option: `--device`, in predict's errors as in train's."""
    from conftest import mlp_conf, write_csv_blobs

    conf = tmp_path / "job.conf"
    conf.write_text(mlp_conf(write_csv_blobs(tmp_path / "b.csv"), tmp_path / "ws", steps=2))
    res = CliRunner().invoke(app, ["train", str(conf), "-q", "--no-tensorboard"])
    assert res.exit_code == 0, res.output
    (tmp_path / "in.csv").write_text("1,2,3,4\n")
    for spec in ("tpu", "cuda:0"):
        cupy_says(35, INSUFFICIENT, driver=False)
        res = CliRunner().invoke(
            app, ["predict", str(conf), str(tmp_path / "in.csv"), "--device", spec]
        )
        assert res.exit_code == 2, res.output
        assert res.output.startswith("--device: error: "), res.output
