"""The checks that need a real GPU (CuPy and a CUDA device); each skips with its reason
elsewhere. CI has no GPU: the same code paths run there on the stand-in device
(tests/test_devices.py, tests/layers/test_registry_gradients.py). On a GPU machine:

    .ci/gpu-check      # these tests, tests/test_devices.py and benchmarks/gpu.py

See docs/testing.md, "On a GPU".
"""

from __future__ import annotations

import numpy as np
import pytest

from singa_core.testing import gpu_skip_reason
from tests.conftest import REPO

REASON = gpu_skip_reason()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")


@pytest.fixture(scope="module")
def gpu():
    from singa_core.device import open_device

    return open_device("cuda:0")


def _train(conf, ws, device, steps, resume=False, **over):
    from singa_core.api.job import Job

    overrides = {"train_steps": steps, "test_freq": 0, "checkpoint_freq": 20,
                 "num_openblas_threads": 1, **over}  # fmt: skip
    job = Job.from_file(conf, overrides, seed=11, workspace=ws, device=device, quiet=True)
    return job.train(resume=resume)


def _params(ws, step):
    from singa_core.running.checkpoint import read_params

    return {
        r.name: np.array(r.value) for r in read_params(ws / "checkpoint" / f"step{step}-worker0")
    }


def _mnist(mnist_stores, tmp_path, name):
    text = (REPO / "examples" / "mnist" / name).read_text()
    conf = tmp_path / name
    conf.write_text(text.replace("examples/mnist/", f"{mnist_stores}/"))
    return conf


@pytest.mark.slow
@pytest.mark.parametrize("name", ["job.conf", "conv.conf"])
def test_gpu_trajectories_stay_within_1e_4_of_the_cpu(gpu, mnist_stores, tmp_path, name):
    conf = _mnist(mnist_stores, tmp_path, name)
    _train(conf, tmp_path / "cpu", "cpu", 100)
    _train(conf, tmp_path / "gpu", "cuda:0", 100)
    a, b = _params(tmp_path / "cpu", 100), _params(tmp_path / "gpu", 100)
    worst = max(np.linalg.norm(b[k] - a[k]) / max(np.linalg.norm(a[k]), 1e-12) for k in a)
    print(f"{name}: largest relative difference after 100 steps on cuda:0: {worst:.3g}")
    assert worst <= 1e-4


@pytest.mark.slow
def test_a_gpu_checkpoint_resumes_on_the_cpu_and_predicts_without_a_gpu(
    gpu, mnist_stores, tmp_path
):
    from singa_core.api.job import Job

    conf = _mnist(mnist_stores, tmp_path, "job.conf")
    _train(conf, tmp_path / "ws", "cuda:0", 20)
    _train(conf, tmp_path / "ws", "cpu", 40, resume=True)
    _train(conf, tmp_path / "cpu", "cpu", 40)
    a, b = _params(tmp_path / "cpu", 40), _params(tmp_path / "ws", 40)
    for k in a:
        np.testing.assert_allclose(b[k], a[k], rtol=1e-4, atol=1e-6)
    job = Job.from_file(conf, workspace=tmp_path / "ws")
    x = np.random.default_rng(0).integers(0, 255, (5, 784)).astype(np.float32)
    np.testing.assert_allclose(
        job.model(device="cuda:0").predict(x), job.model().predict(x), rtol=1e-4, atol=1e-6
    )


@pytest.mark.slow
def test_the_mnist_example_reaches_its_cpu_accuracy_on_the_gpu(gpu, mnist_stores, tmp_path):
    conf = _mnist(mnist_stores, tmp_path, "job.conf")
    result = _train(conf, tmp_path / "ws", "cuda:0", 1000, test_steps=100, test_freq=1000)
    acc = result.metrics["test"]["accuracy"]
    print(f"MNIST MLP, 1000 steps on cuda:0: test accuracy {acc:.4f}")
    assert acc >= 0.85


@pytest.mark.slow
def test_shm_workers_on_the_gpu_train_as_on_the_cpu(gpu, small_job, tmp_path):
    """The shm engine's worker on cuda:0 (device copies of the server's values, gradients to
    the host segment) ends where the CPU run ends; then two worker groups in one process
    share the GPU (gpu: 0 gpu: 0)."""
    from conftest import run_singa

    from tests.test_devices import shm_run_on

    conf, _ = small_job(steps=30, dropout=True)
    shm_run_on(conf, tmp_path, "cuda:0", rtol=1e-4, atol=1e-6)
    r = run_singa(
        "train", str(conf), "--engine", "shm", "--device", "cuda:0", "--seed", "4",
        "--workspace", str(tmp_path / "two"), "-o", "cluster.nworker_groups=2",
        "-o", "cluster.nworkers_per_procs=2",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "finished at step 30" in r.stderr


@pytest.mark.slow
def test_cudnn_hybrid_conf_on_the_gpu_and_the_cpu_trains_as_on_the_cpu(gpu, tmp_path):
    """examples/cifar10/cudnn_hybrid.conf as written (gpu: 0: worker 0 on cuda:0, worker 1
    on the CPU, the cuDNN types) against hybrid.conf on the CPU alone: the same Params after
    4 steps. Uses examples/cifar10's stores (.ci/gpu-check converts them)."""
    from conftest import run_singa

    from tests.test_devices import final_params

    stores = REPO / "examples" / "cifar10"
    if not (stores / "train_data.bin").exists():
        pytest.skip("needs examples/cifar10's stores: singa data cifar10 --out examples/cifar10")
    out = {}
    for name in ("cudnn_hybrid.conf", "hybrid.conf"):
        ws = tmp_path / name
        sets = {"cluster.workspace": ws, "train_steps": 4, "test_steps": 0,
                "checkpoint_freq": 4, "num_openblas_threads": 1}  # fmt: skip
        args = [a for k, v in sets.items() for a in ("-o", f"{k}={v}")]
        r = run_singa("train", str(stores / name), "--seed", "0", *args)
        assert r.returncode == 0, r.stderr
        if name == "cudnn_hybrid.conf":
            assert "device: worker 0 on cuda:0" in r.stderr, r.stderr
            assert "device: worker 1 on cpu" in r.stderr, r.stderr
        out[name] = final_params(ws)
    a, b = out["hybrid.conf"], out["cudnn_hybrid.conf"]
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_allclose(b[k], a[k], rtol=1e-4, atol=1e-6, err_msg=k)


def test_every_cuda_kernel_equals_its_host_implementation_on_the_gpu(gpu):
    """The kernels' CUDA implementations through CuPy (NVRTC, a real GPU) against their
    host implementations: the cases CI runs on the emulated runtime."""
    from singa_core.kernels import get_kernel
    from tests.core import test_kernels as tk

    def to_gpu(x):
        if isinstance(x, np.ndarray):
            return gpu.asarray(x) if x.flags.c_contiguous else _strided_like(x)
        if isinstance(x, list):
            return [to_gpu(v) for v in x]
        return x

    def _strided_like(x):  # the same strides on the device: a transposed contiguous copy
        order = np.argsort(x.strides)[::-1]
        base = gpu.asarray(np.ascontiguousarray(x.transpose(order)))
        return base.transpose(np.argsort(order))

    def back(x):
        if isinstance(x, list):
            return [back(v) for v in x]
        return None if x is None else gpu.to_host(x)

    for name, cases in tk.CASES.items():
        for i, make in enumerate(cases):
            args, outs, tol = make(np.random.default_rng(i))
            host_args, dev_args = tk._copy(args), to_gpu(tk._copy(args))
            get_kernel(name).host(*host_args)
            getattr(gpu.kernels, name)(*dev_args)
            for j in outs:
                tk._close(host_args[j], back(dev_args[j]), max(tol, 2e-6), f"{name}[{i}] arg {j}")


def test_a_fused_bias_and_activation_on_the_gpu_compute_what_the_cpu_does(gpu, tmp_path):
    """kInnerProduct → activation paired on a GPU (one bias_*_forward launch): the product's
    data is still x·Wᵀ + b and the activation's output the CPU's, for every activation."""
    from singa_core.device import to_host
    from tests.test_bias_fusion import HIDDEN, _forward, _net

    b = np.random.default_rng(1).standard_normal(16).astype(np.float32)
    for key, hidden in HIDDEN.items():
        folder = tmp_path / key.replace(" ", "-")
        folder.mkdir()
        nets = {d: _net(folder, d, hidden) for d in ("cpu", "cuda:0")}
        dev, cpu = nets["cuda:0"], nets["cpu"]
        assert dev.by_name["hidden"].absorbed_bias is dev.by_name["ip1"].bias, key
        assert dev.by_name["loss"].absorbed_bias is dev.by_name["ip2"].bias, key
        for net in nets.values():
            _forward(net, {"ip1": b})
        for name in ("ip1", "hidden", "ip2"):
            np.testing.assert_allclose(
                to_host(dev.by_name[name].data), cpu.by_name[name].data, rtol=1e-5, atol=1e-6,
                err_msg=f"{key}: {name}",
            )  # fmt: skip
        loss = float(to_host(dev.by_name["loss"].loss))  # bias_softmax_xent's CUDA kernel
        assert loss == pytest.approx(float(cpu.by_name["loss"].loss), rel=1e-5), key
