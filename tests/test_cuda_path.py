"""The CUDA path run on the CPU: whole training steps on ``standin:cuda``.

On that device every kernel runs its CUDA implementation (the code a GPU runs, compiled for
the CPU by the emulated runtime, cuBLAS served by the host's BLAS) over the stand-in's
device arrays. Small versions of the examples and every built-in updater train a few
steps there and on the CPU with one seed; every Param agrees within 1e-5 relative
(‖cuda − cpu‖ / ‖cpu‖: the CUDA code sums in another order and uses fused multiply-adds).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from singa_core.cuda import EmulatedRuntime
from singa_core.running.checkpoint import read_params
from singa_core.testing import count_training_steps, mlp_job
from tests.conftest import REPO

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(EmulatedRuntime.compiler() is None, reason="needs a C++ compiler"),
]

TOLERANCE = 1e-5


def _train(conf, ws: Path, device: str, overrides: dict) -> dict[str, np.ndarray]:
    from singa_core.api.job import Job

    settings = {"test_steps": 0, "test_freq": 0, "disp_freq": 1000, "checkpoint_freq": 0,
                "num_openblas_threads": 1, **overrides}  # fmt: skip
    job = Job.from_file(conf, settings, seed=7, workspace=ws, device=device, quiet=True,
                        live=False)  # fmt: skip
    job.train()
    last = sorted((ws / "checkpoint").glob("step*-worker0"))[-1]
    return {r.name: np.array(r.value) for r in read_params(last)}


def _agree(conf, tmp_path, overrides) -> float:
    cpu = _train(conf, tmp_path / "cpu", "cpu", overrides)
    cuda = _train(conf, tmp_path / "cuda", "standin:cuda", overrides)
    assert cpu.keys() == cuda.keys()
    worst = max(
        float(np.linalg.norm(cuda[k] - v) / max(np.linalg.norm(v), 1e-12)) for k, v in cpu.items()
    )
    assert worst <= TOLERANCE, f"largest relative difference of a Param: {worst:.2e}"
    return worst


def _example(name: str, stores: Path, tmp_path: Path, folder: str) -> Path:
    text = (REPO / "examples" / folder / name).read_text()
    conf = tmp_path / name
    conf.write_text(text.replace(f"examples/{folder}/", f"{stores}/"))
    return conf


@pytest.mark.parametrize("name", ["job.conf", "conv.conf"])
def test_mnist_mlp_and_lenet_train_through_their_cuda_code_as_on_the_cpu(
    mnist_stores, tmp_path, name
):
    conf = _example(name, mnist_stores, tmp_path, "mnist")
    _agree(conf, tmp_path, {"train_steps": 6})


def test_the_cifar10_net_with_its_lrn_trains_through_its_cuda_code(cifar_stores, tmp_path):
    conf = _example("job.conf", cifar_stores, tmp_path, "cifar10")
    small = {"train_steps": 2}
    for i in (0, 1):
        small[f"neuralnet.layer[{i}].store_conf.batchsize"] = 20
    _agree(conf, tmp_path, small)


def _char_rnn_overrides(texts: Path) -> dict:
    ov = {"train_steps": 3, "neuralnet.layer[4].gru_conf.dim_hidden": 24}
    for i, name in ((0, "train.txt"), (1, "val.txt")):
        ov[f"neuralnet.layer[{i}].char_rnn_conf.path"] = texts / name
        ov[f"neuralnet.layer[{i}].char_rnn_conf.vocab_path"] = texts / "vocab.txt"
        ov[f"neuralnet.layer[{i}].char_rnn_conf.batchsize"] = 8
    return ov


def test_char_rnn_unrolled_in_sequence_runs_trains_through_its_cuda_code(
    texts, tmp_path, monkeypatch
):
    monkeypatch.setenv("SINGA_SEQUENCE_RUNS", "1")
    _agree(REPO / "examples" / "char-rnn" / "job.conf", tmp_path, _char_rnn_overrides(texts))


UPDATERS = {
    "kSGD": "",
    "kNesterov": "",
    "kAdaGrad": "delta: 1e-6",
    "kRMSProp": "rmsprop_conf { rho: 0.9 } delta: 1e-6",
    "kAdaDelta": "adadelta_conf { rho: 0.95 } delta: 1e-6",
    "kAdam": "adam_conf { beta1: 0.9 beta2: 0.999 } delta: 1e-7",
    "kAdamMax": "adammax_conf { beta1: 0.9 beta2: 0.999 } delta: 1e-7",
}


@pytest.mark.parametrize("momentum, weight_decay", [(0.0, 0.0), (0.9, 0.01)])
@pytest.mark.parametrize("updater", sorted(UPDATERS))
def test_every_updater_trains_through_its_update_kernel_as_on_the_cpu(
    tmp_path, updater, momentum, weight_decay
):
    """A small MLP (tests' blobs) under each built-in updater, with and without momentum
    and weight decay: the one-launch update kernel's CUDA code against the CPU's apply()."""
    from singa_core.testing import blobs_csv

    data = blobs_csv(tmp_path / "blobs.csv")
    conf = tmp_path / "job.conf"
    fields = f"type: {updater} momentum: {momentum} weight_decay: {weight_decay} "
    conf.write_text(mlp_job(data, steps=12, updater=fields + UPDATERS[updater]))
    _agree(conf, tmp_path, {})


def test_the_counts_of_a_step_are_observed_where_the_runtime_launches(mnist_stores):
    """On standin:cuda a launch is counted by the runtime (a raw kernel, a GEMM), not by
    what a kernel declares; today both agree for the MLP."""
    ov = [
        f"neuralnet.layer[0].store_conf.path={mnist_stores / 'train_data.bin'}",
        f"neuralnet.layer[1].store_conf.path={mnist_stores / 'test_data.bin'}",
    ]
    observed = count_training_steps(REPO / "examples" / "mnist" / "job.conf", ov)
    declared = count_training_steps(REPO / "examples" / "mnist" / "job.conf", ov, device="standin")
    assert observed.kernels == declared.kernels and observed.reads == 0
    assert observed.by_name.get("kernels:singa_sgd_update") == 1  # the raw kernel, by name
    assert observed.by_name.get("kernels:cublas_sgemm", 0) >= 1
