"""docs/guide/predict.md's Python examples run as the page shows them
(docs/examples/guide/: predict_mnist.py, sample_char_rnn.py, onnx_char_rnn.py), from a
folder laid out as the repository is, whose examples/ hold the real data and jobs trained
a few steps: the MNIST MLP and LeNet, char-rnn (its sampling net predicting through the
deploy net, and exported to ONNX)."""

from __future__ import annotations

import contextlib
import importlib.util
import runpy
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, invoke_singa, need_extra

from singa_core import Job

pytestmark = pytest.mark.slow
GUIDE = REPO / "docs" / "examples" / "guide"
QUIET = {"test_steps": 0, "test_freq": 0, "disp_freq": 1000, "checkpoint_freq": 0}


def train(conf: str, steps: int, **settings) -> None:
    """``conf`` (a path under the current folder) trained ``steps`` steps; its workspace
    ends with a checkpoint."""
    job = Job.from_file(conf, {**QUIET, "train_steps": steps, **settings}, seed=1, quiet=True,
                        live=False)  # fmt: skip
    job.train()


@pytest.fixture(scope="module")
def site(tmp_path_factory, mnist_stores, data_dir):
    """A folder with examples/mnist (the stores, job.conf and conv.conf trained 3 steps)
    and examples/char-rnn (tiny-shakespeare's files, job.conf trained 2 steps)."""
    from singa_core.commands.datasets import prepare_dataset
    from singa_core.plugin_host.host import get_host

    root = tmp_path_factory.mktemp("site")
    mnist, chars = root / "examples" / "mnist", root / "examples" / "char-rnn"
    mnist.mkdir(parents=True)
    for name in ("job.conf", "conv.conf"):
        shutil.copy(REPO / "examples" / "mnist" / name, mnist / name)
    for name in ("train_data.bin", "test_data.bin"):
        (mnist / name).symlink_to(mnist_stores / name)
    prepare_dataset(get_host().get("dataset", "tinyshakespeare")(), chars,
                    data_dir / "tinyshakespeare")  # fmt: skip
    for name in ("job.conf", "sample.conf"):
        shutil.copy(REPO / "examples" / "char-rnn" / name, chars / name)
    with contextlib.chdir(root):
        train("examples/mnist/job.conf", 3)
        train("examples/mnist/conv.conf", 3)
        small = {"neuralnet.unroll_len": 10, "neuralnet.layer[0].char_rnn_conf.unroll_len": 10,
                 "neuralnet.layer[0].char_rnn_conf.batchsize": 8}  # fmt: skip
        train("examples/char-rnn/job.conf", 2, **small)
    return root


def test_predicting_mnist_from_python(site, mnist_stores, monkeypatch, capsys):
    """The MLP takes flat samples, LeNet the same digits as images channels last."""
    monkeypatch.chdir(site)
    spec = importlib.util.spec_from_file_location("predict_mnist", GUIDE / "predict_mnist.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    x = np.random.default_rng(0).integers(0, 256, size=(5, 784)).astype(np.float32)
    model, probs, classes, digits = example.predict(x, x.reshape(5, 28, 28, 1))
    printed = capsys.readouterr().out
    assert "(784,) (10,)" in printed and "step 3" in printed
    assert probs.shape == digits.shape == (5, 10) and classes.shape == (5,)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)
    np.testing.assert_array_equal(classes, probs.argmax(axis=1))
    # the channels-last images are the samples LeNet takes channels first
    lenet = Job.from_file("examples/mnist/conv.conf").model()
    np.testing.assert_array_equal(digits, lenet.predict(x.reshape(5, 1, 28, 28)))


def sampled(steps: int, first: int) -> tuple[str, int, np.ndarray]:
    """The text the sampling net writes from character ``first`` through ``predict``, its
    last character and the GRU's state."""
    model = Job.from_file("examples/char-rnn/sample.conf").model(batch=1)
    vocab = Path("examples/char-rnn/vocab.txt").read_text()
    c, text = first, ""
    for _ in range(steps):
        c = int(model.predict([c])[0, 0])
        text += vocab[c]
    return text, c, model.net.by_name["gru1"].data.reshape(1, -1).copy()


def test_the_char_rnn_deploy_net_writes_text(site, monkeypatch):
    monkeypatch.chdir(site)
    got = runpy.run_path(str(GUIDE / "sample_char_rnn.py"))
    vocab = (site / "examples" / "char-rnn" / "vocab.txt").read_text()
    text, _, _ = sampled(200, vocab.index("T"))
    assert got["text"] == text and len(text) == 200


def test_the_char_rnn_onnx_export_writes_the_same(site, monkeypatch, capsys):
    """The export fed back 100 calls in onnxruntime ends where predict does."""
    need_extra("onnxruntime")
    monkeypatch.chdir(site)
    res = invoke_singa("export", "examples/char-rnn/sample.conf", "--out", "sample.onnx")
    assert res.exit_code == 0, res.output
    got = runpy.run_path(str(GUIDE / "onnx_char_rnn.py"))
    _, last, state = sampled(100, 17)
    assert int(got["c"][0]) == last
    np.testing.assert_allclose(got["state"], state, atol=1e-4)
