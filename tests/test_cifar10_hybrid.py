"""examples/cifar10/hybrid.conf (§8.3 variant): the CIFAR-10 net with ip1 split on its
outputs and everything else on the batch, 2 workers of one group in one process. Started
from job.conf's initial values, it trains exactly as the unpartitioned job.conf."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import REPO, run_singa

from singa_core.running import checkpoint as ck

EXAMPLE = REPO / "examples" / "cifar10"
STEPS = 4


@pytest.fixture(scope="module")
def stores(data_dir, tmp_path_factory):
    from singa_core.commands.datasets import prepare_dataset
    from singa_core.plugin_host.host import get_host

    out = tmp_path_factory.mktemp("cifar10")
    prepare_dataset(get_host().get("dataset", "cifar10")(), out, data_dir / "cifar10")
    return out


def overrides(stores, ws) -> list[str]:
    sets = {
        "neuralnet.layer[0].store_conf.path": stores / "train_data.bin",
        "neuralnet.layer[0].store_conf.mean_file": stores / "image_mean.bin",
        "neuralnet.layer[1].store_conf.path": stores / "test_data.bin",
        "neuralnet.layer[1].store_conf.mean_file": stores / "image_mean.bin",
        "cluster.workspace": ws,
        "train_steps": STEPS,
        "test_steps": 0,
        "checkpoint_freq": STEPS,
        "num_openblas_threads": 1,
    }
    return [a for k, v in sets.items() for a in ("-o", f"{k}={v}")]


def params(ws, step):
    return {r.name: r.value for r in ck.read_params(ws / "checkpoint" / f"step{step}-worker0")}


@pytest.mark.slow
def test_hybrid_partitioning_trains_like_the_whole_net(stores, tmp_path):
    whole, hybrid = tmp_path / "whole", tmp_path / "hybrid"
    proc = run_singa("train", str(EXAMPLE / "job.conf"), "--seed", "0", *overrides(stores, whole))
    assert proc.returncode == 0, proc.stderr
    start = []
    for name, value in params(whole, 0).items():  # ip1 (w4, b4): its outputs in halves
        if name in ("0#w4", "0#b4"):
            first, second = np.split(value, 2, axis=0)
            start += [ck.ParamRecord(name, 0, first), ck.ParamRecord(name + "@1", 0, second)]
        else:
            start.append(ck.ParamRecord(name, 0, value))
    init = tmp_path / "init"
    init.write_bytes(ck.encode_params(start))
    proc = run_singa(
        "train",
        str(EXAMPLE / "hybrid.conf"),
        "--seed",
        "0",
        *overrides(stores, hybrid),
        "-o",
        f"checkpoint_path={init}",
    )
    assert proc.returncode == 0, proc.stderr
    assert "workers 0-1" not in proc.stdout  # (the layout is printed by --dry-run only)
    a, b = params(whole, STEPS), params(hybrid, STEPS)
    assert set(b) == set(a) | {"0#w4@1", "0#b4@1"}
    for name, value in a.items():
        got = b[name]
        if name in ("0#w4", "0#b4"):
            got = np.concatenate([b[name], b[name + "@1"]], axis=0)
        np.testing.assert_allclose(got, value, rtol=1e-4, atol=1e-6, err_msg=name)
    # and it moved: these are trained values, not the initial ones
    assert not np.allclose(a["0#w4"], params(whole, 0)["0#w4"])


@pytest.mark.slow
def test_the_hybrid_job_with_its_workers_on_two_devices(stores, tmp_path):
    """SINGA 0.3's cudnn_hybrid.conf: worker 0 of the group on a GPU, worker 1 on the CPU,
    the batch split between them. Here worker 0 is on the stand-in device (CI has no GPU):
    the replicas' shared Params are mirrored on the CPU worker's side and refreshed after
    every update, the bridges and splits copy across the devices, and the job trains as on
    the CPU alone."""
    cpu, hybrid = tmp_path / "cpu", tmp_path / "hybrid"
    for ws, device in ((cpu, "cpu"), (hybrid, "standin,cpu")):
        proc = run_singa(
            "train",
            str(EXAMPLE / "hybrid.conf"),
            "--seed",
            "0",
            "--device",
            device,
            *overrides(stores, ws),
        )
        assert proc.returncode == 0, proc.stderr
    assert "device: worker 0 on standin" in proc.stderr
    assert "device: worker 1 on cpu" in proc.stderr
    a, b = params(cpu, STEPS), params(hybrid, STEPS)
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_allclose(b[k], a[k], rtol=1e-5, atol=1e-7)


@pytest.mark.slow
def test_cudnn_hybrid_conf_is_hybrid_conf_on_a_gpu_and_the_cpu(stores, tmp_path):
    """examples/cifar10/cudnn_hybrid.conf (0.3's): gpu 0 for worker 0, the cuDNN types. With
    worker 0 on the stand-in (--device standin,cpu) it trains as hybrid.conf on the CPU;
    without a GPU as asked it stops before step 0 at its gpu line."""
    import importlib.util

    cudnn, plain = tmp_path / "cudnn", tmp_path / "plain"
    proc = run_singa("train", str(EXAMPLE / "cudnn_hybrid.conf"), "--seed", "0", "--device",
                     "standin,cpu", *overrides(stores, cudnn))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "note: layer type kCudnnConv runs as kCConvolution" in proc.stderr
    proc = run_singa("train", str(EXAMPLE / "hybrid.conf"), "--seed", "0",
                     *overrides(stores, plain))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    a, b = params(plain, STEPS), params(cudnn, STEPS)
    for k in a:
        np.testing.assert_allclose(b[k], a[k], rtol=1e-5, atol=1e-7)
    if importlib.util.find_spec("cupy") is None:
        proc = run_singa("train", str(EXAMPLE / "cudnn_hybrid.conf"), "--dry-run",
                         *overrides(stores, tmp_path / "nogpu"))  # fmt: skip
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        assert "cudnn_hybrid.conf:" in proc.stderr and "--device cpu" in proc.stderr
