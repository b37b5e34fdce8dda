"""Training steps captured once and replayed (``--engine-option graphs=on``, the in-process
engine; plugins/engines/graphed_step.py), on ``standin:cuda``: the kernels' CUDA code run on
the CPU, every launch and copy recorded at the second step and replayed after.

A replayed run is the eager run, bit for bit: the same metric lines (displays, tests) and
byte-identical Params, through learning-rate changes (the rate lives in device memory),
random draws (counted by the step in device memory), evaluations and checkpoints between
replays, and a resume. A step that cannot be captured is a located error naming the call
and the layer."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

from singa_core.cuda import EmulatedRuntime
from singa_core.running.checkpoint import read_params
from singa_core.testing import blobs_csv, mlp_job
from tests.conftest import REPO, run_singa
from tests.test_cuda_path import _char_rnn_overrides, _example

pytestmark = pytest.mark.skipif(EmulatedRuntime.compiler() is None, reason="needs a C++ compiler")


def _train(conf, ws: Path, graphs: str, settings: dict, resume=False) -> tuple[dict, list[str]]:
    from singa_core.api.job import Job

    out = io.StringIO()
    job = Job.from_file(
        conf, {"num_openblas_threads": 1, **settings}, seed=7, workspace=ws,
        device="standin:cuda", engine_options={"graphs": graphs}, out=out, err=out,
        live=False,
    )  # fmt: skip
    job.train(resume=resume)
    last = sorted((ws / "checkpoint").glob("step*-worker0"))[-1]
    params = {r.name: np.array(r.value) for r in read_params(last)}
    lines = [x for x in out.getvalue().splitlines() if "step-" in x or x.startswith("graphs:")]
    return params, lines


def _replays_as_it_runs(conf, tmp_path: Path, settings: dict) -> list[str]:
    eager, eager_lines = _train(conf, tmp_path / "eager", "off", settings)
    replayed, lines = _train(conf, tmp_path / "graphs", "on", settings)
    assert [x for x in lines if not x.startswith("graphs:")] == eager_lines
    assert any(x.startswith("graphs: step 1 captured") for x in lines), lines
    assert eager.keys() == replayed.keys()
    for name, value in eager.items():
        np.testing.assert_array_equal(replayed[name], value, err_msg=name)
    return lines


@pytest.mark.slow
@pytest.mark.parametrize("name", ["job.conf", "conv.conf"])
def test_the_mlp_and_lenet_replay_100_steps_as_they_run(mnist_stores, tmp_path, name):
    """The MLP's rate changes at step 60 (kStep), LeNet's every step (kInverse); tests at
    steps 0, 50 and 100, a checkpoint at 50, displays every 20."""
    conf = _example(name, mnist_stores, tmp_path, "mnist")
    settings = {"train_steps": 100, "disp_freq": 20, "test_freq": 50, "test_steps": 2,
                "checkpoint_freq": 50}  # fmt: skip
    lines = _replays_as_it_runs(conf, tmp_path, settings)
    assert sum("Train step-" in x for x in lines) == 5


@pytest.mark.slow
def test_the_cifar10_net_char_rnn_and_an_rbm_replay_as_they_run(
    cifar_stores,
    texts,
    mnist_stores,
    tmp_path,  # noqa: F811 (fixtures of test_cuda_path)
):
    small = {"train_steps": 8, "disp_freq": 3, "test_freq": 4, "test_steps": 1}
    cifar = dict(small)
    for i in (0, 1):
        cifar[f"neuralnet.layer[{i}].store_conf.batchsize"] = 20
    conf = _example("job.conf", cifar_stores, tmp_path, "cifar10")
    _replays_as_it_runs(conf, tmp_path / "cifar10", cifar)
    char_rnn = {**_char_rnn_overrides(texts), **small}
    _replays_as_it_runs(REPO / "examples" / "char-rnn" / "job.conf", tmp_path / "rnn", char_rnn)
    rbm = tmp_path / "rbm1.conf"  # CD-1: samples drawn on the device every step
    text = (REPO / "examples" / "rbm" / "rbm1.conf").read_text()
    rbm.write_text(text.replace("examples/mnist/", f"{mnist_stores}/"))
    _replays_as_it_runs(rbm, tmp_path / "rbm", small)


def _dropout_mlp(tmp_path: Path) -> Path:
    """The kit's MLP with a kDropout layer between ip1 and its activation."""
    conf = tmp_path / "dropout.conf"
    text = mlp_job(blobs_csv(tmp_path / "blobs.csv"), steps=30)
    marker = 'layer { name: "hidden" srclayers: "ip1"'
    assert marker in text, text
    dropout = (
        'layer { name: "drop" type: kDropout srclayers: "ip1" '
        "dropout_conf { dropout_ratio: 0.4 } }\n  "
    )
    conf.write_text(text.replace(marker, dropout + 'layer { name: "hidden" srclayers: "drop"'))
    return conf


def test_a_dropout_net_replays_as_it_runs_and_resumes_as_it_ran(tmp_path):
    """Dropout's masks are drawn on the device by step: a replayed step draws anew, and a
    run resumed from step 15 with graphs ends where the uninterrupted one does."""
    conf = _dropout_mlp(tmp_path)
    settings = {"disp_freq": 5, "test_freq": 10, "test_steps": 1, "checkpoint_freq": 15}
    _replays_as_it_runs(conf, tmp_path / "whole", settings)
    whole, _ = _train(conf, tmp_path / "whole-again", "on", settings)
    half = dict(settings, train_steps=15)
    _train(conf, tmp_path / "resumed", "on", half)
    resumed, lines = _train(conf, tmp_path / "resumed", "on", settings, resume=True)
    assert not any("step-10," in x for x in lines), lines  # it went on from step 15
    for name, value in whole.items():
        np.testing.assert_array_equal(resumed[name], value, err_msg=name)


def test_graphs_need_the_cuda_code_and_a_known_value(tmp_path):
    conf = tmp_path / "job.conf"
    conf.write_text(mlp_job(blobs_csv(tmp_path / "blobs.csv"), steps=3))
    ws = ["--workspace", str(tmp_path / "ws")]
    res = run_singa("train", str(conf), *ws, "--device", "standin", "--engine-option", "graphs=on")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert "graphs=on replays the kernels' CUDA code" in res.stderr
    assert "help: run it with --device standin:cuda" in res.stderr
    res = run_singa("train", str(conf), *ws, "--engine-option", "graphs=maybe")
    assert res.returncode == 2 and "graphs is 'maybe'" in res.stderr, res.stderr


def test_a_step_that_reads_the_device_is_refused_naming_the_layer_and_the_call():
    from singa_core import capture
    from singa_core.device import standin_device, using_device
    from singa_core.layer import NeuronLayer, kForward, kTrain
    from singa_core.testing import SourceLayer, build

    class Peeking(NeuronLayer):  # a layer whose forward reads its input on the host
        type_names = ("kPeeking",)
        placement = "device"

        def setup(self, srcs):
            self.alloc(srcs[0].data.shape)

        def forward(self, phase, srcs):
            if float(srcs[0].data.sum()) > 0:
                self.data[...] = srcs[0].data

    device = standin_device("cuda")
    with using_device(device), device.activate():
        src = SourceLayer(np.ones((2, 3), np.float32))
        layer = build(Peeking, 'name: "peek"', [src])
        with pytest.raises(capture.CaptureRefused) as refused, capture.capturing():
            layer.forward(kTrain | kForward, [src])
    text = refused.value.format()
    assert "cannot allocate device memory: sum by layer 'peek' (kPeeking) in forward" in text
    assert "help: " in text
