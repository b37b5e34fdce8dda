"""char-rnn writes text from its deploy net, as 0.3's sample.conf did: the kRNNDummy
placeholder is the input, the GRU carries its state from one call to the next, and feeding
each prediction back reproduces the text `singa test sample.conf` prints."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import REPO, run_singa

from singa_core import Job
from singa_core.errors import SingaError

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def trained(data_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("char-rnn")
    res = run_singa(
        "data", "tinyshakespeare", "--out", str(folder), "--from", str(data_dir / "tinyshakespeare")
    )
    assert res.returncode == 0, res.stderr
    data = []
    for k, name in ((0, "train"), (1, "val")):
        data += [
            "-o",
            f"neuralnet.layer[{k}].char_rnn_conf.path={folder / (name + '.txt')}",
            "-o",
            f"neuralnet.layer[{k}].char_rnn_conf.vocab_path={folder / 'vocab.txt'}",
        ]
    res = run_singa(
        "train",
        str(REPO / "examples" / "char-rnn" / "job.conf"),
        "-q",
        *data,
        "-o",
        f"cluster.workspace={folder / 'ws'}",
        "-o",
        "train_steps=40",
        "-o",
        "test_steps=1",
        "--seed",
        "3",
    )
    assert res.returncode == 0, res.stderr
    sample = [
        f"cluster.workspace={folder / 'ws'}",
        f"neuralnet.layer[6].char_rnn_conf.vocab_path={folder / 'vocab.txt'}",
    ]
    return folder, sample


def test_the_deploy_net_samples_what_singa_test_prints(trained):
    folder, sample = trained
    conf = REPO / "examples" / "char-rnn" / "sample.conf"
    args = [a for o in sample for a in ("-o", o)]
    res = run_singa("test", str(conf), "--steps", "80", *args)
    assert res.returncode == 0, res.stderr
    printed = res.stdout[: res.stdout.index("Test (")].rstrip("\n")

    model = Job.from_file(conf, overrides=sample).model(batch=1)
    assert model.plan.inputs == ["data"] and model.plan.output == "argsort"
    assert model.sample_shape == () and model.carriers
    from singa_builtins.layers._text import read_vocab

    vocab = read_vocab(model.net.layers[0], str(folder / "vocab.txt"), "vocab_path")

    def generate(first: int, n: int = 80) -> str:
        model.reset_state()
        c, out = first, []
        for _ in range(n):
            c = int(model.predict(np.array([c]))[0, 0])
            out.append(vocab[c])
        return "".join(out)

    # sample.conf's first character is a random draw: one of the 65 must give its text
    seeds = [c for c in range(len(vocab)) if generate(c).rstrip("\n") == printed]
    assert seeds, printed
    # the state is carried: the same input meets another GRU state after a different past
    gru = model.net.by_name["gru1"]
    model.reset_state()
    model.predict(np.array([5]))
    fresh = gru.data.copy()
    model.predict(np.array([9]))
    model.predict(np.array([5]))
    assert not np.array_equal(gru.data, fresh)
    model.reset_state()
    model.predict(np.array([5]))
    assert np.array_equal(gru.data, fresh)
    with pytest.raises(SingaError, match="at most 1 rows a call"):
        model.predict(np.array([1, 2]))

    # the ONNX export of the sampling net: the GRU's state in and out of the graph
    ort = pytest.importorskip("onnxruntime")
    out = folder / "sample.onnx"
    res = run_singa("export", str(conf), *args, "--out", str(out))
    assert res.returncode == 0, res.stderr
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    assert names == ["output", "gru1/state_out"]
    c, state, text = seeds[0], None, []
    for _ in range(80):
        feed = {"input": np.array([c], dtype=np.float32)}
        if state is not None:
            feed["gru1/state"] = state
        pred, state = session.run(names, feed)
        c = int(pred[0, 0])
        text.append(vocab[c])
    assert "".join(text).rstrip("\n") == printed
