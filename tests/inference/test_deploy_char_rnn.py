"""char-rnn writes text from its deploy net, as 0.3's sample.conf did: the kRNNDummy
placeholder is the input, the GRU carries its state from one call to the next, and feeding
each prediction back reproduces the text `singa test sample.conf` prints.

The ONNX export of that net has the GRU's state as a graph input ``gru1/state`` (never also
an initializer) and its new state as the output ``gru1/state_out``. Both forms
(``--onnx-state required|optional``) are run in onnxruntime and onnx's ReferenceEvaluator,
the required one also in onnx2torch (where installed); fed back call after call, the state
writes the text singa writes, with the states singa's GRU holds."""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import REPO, need_extra, run_singa

from singa_core import Job
from singa_core.errors import SingaError

pytestmark = pytest.mark.slow

CONF = REPO / "examples" / "char-rnn" / "sample.conf"
STEPS = 80
HIDDEN = 512  # sample.conf's dim_hidden


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


@pytest.fixture(scope="module")
def sampled(trained):
    """The text `singa test sample.conf` prints, and the first character, text and GRU
    states (one per call) that predict gives for it."""
    folder, sample = trained
    args = [a for o in sample for a in ("-o", o)]
    res = run_singa("test", str(CONF), "--steps", str(STEPS), *args)
    assert res.returncode == 0, res.stderr
    printed = res.stdout[: res.stdout.index("Test (")].rstrip("\n")

    model = Job.from_file(CONF, overrides=sample).model(batch=1)
    from singa_builtins.layers._text import read_vocab

    vocab = read_vocab(model.net.layers[0], str(folder / "vocab.txt"), "vocab_path")
    gru = model.net.by_name["gru1"]

    def generate(first: int) -> tuple[str, list[np.ndarray]]:
        model.reset_state()
        c, out, states = first, [], []
        for _ in range(STEPS):
            c = int(model.predict(np.array([c]))[0, 0])
            out.append(vocab[c])
            states.append(gru.data.reshape(1, HIDDEN).copy())
        return "".join(out), states

    # sample.conf's first character is a random draw: one of the 65 must give its text
    seeds = [c for c in range(len(vocab)) if generate(c)[0].rstrip("\n") == printed]
    assert seeds, printed
    text, states = generate(seeds[0])
    return SimpleNamespace(
        printed=printed, vocab=vocab, seed=seeds[0], states=states, model=model, args=args
    )


@pytest.fixture(scope="module")
def exported(trained, sampled):
    """form -> (path, what `singa export` printed) of the sampling net's ONNX export."""
    folder, _ = trained
    out = {}
    for form in ("required", "optional"):
        path = folder / f"sample-{form}.onnx"
        res = run_singa(
            "export", str(CONF), *sampled.args, "--out", str(path), "--onnx-state", form
        )
        assert res.returncode == 0, res.stderr
        out[form] = (path, res.stdout)
    return out


def chain(step, sampled, state):
    """Feed each prediction and state back ``STEPS`` times from singa's first character;
    ``step(c, state) -> (prediction, state_out)``. Checks the text and every state against
    singa's; returns the last state_out."""
    c, text = sampled.seed, []
    for k in range(STEPS):
        pred, state = step(c, state)
        np.testing.assert_allclose(state, sampled.states[k], atol=1e-4, err_msg=f"call {k}")
        c = int(np.asarray(pred)[0, 0])
        text.append(sampled.vocab[c])
    assert "".join(text).rstrip("\n") == sampled.printed
    return state


def test_the_deploy_net_samples_what_singa_test_prints(sampled):
    model = sampled.model
    assert model.plan.inputs == ["data"] and model.plan.output == "argsort"
    assert model.sample_shape == () and model.carriers
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


@pytest.mark.parametrize("form", ["required", "optional"])
def test_the_state_is_a_graph_input_and_no_initializer(exported, form):
    onnx = need_extra("onnx")
    path, printed = exported[form]
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)  # with shape inference
    graph = model.graph
    assert [i.name for i in graph.input] == ["input", "gru1/state"]
    assert [o.name for o in graph.output] == ["output", "gru1/state_out"]
    assert "gru1/state" not in {t.name for t in graph.initializer}
    state = graph.input[1].type
    if form == "optional":
        assert state.WhichOneof("value") == "optional_type"
        state = state.optional_type.elem_type
    assert state.WhichOneof("value") == "tensor_type"
    dims = state.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in dims] == ["N", HIDDEN]
    assert state.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert f"state 'gru1/state' (N, {HIDDEN}) -> 'gru1/state_out'" in printed
    assert ("feed zeros to start" in printed) == (form == "required")


def _session(path):
    ort = need_extra("onnxruntime")
    options = ort.SessionOptions()
    options.log_severity_level = 2  # warnings and errors
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def test_onnxruntime_runs_both_forms_and_warns_of_nothing(exported, sampled, capfd, tmp_path):
    onnx = need_extra("onnx")
    # the form of earlier versions (the state also an initializer, zeros (1, hidden)) is
    # warned about in the log captured here: the capture sees onnxruntime's warnings
    old = onnx.load(str(exported["required"][0]))
    zeros = np.zeros((1, HIDDEN), np.float32)
    old.graph.initializer.append(onnx.numpy_helper.from_array(zeros, "gru1/state"))
    onnx.save(old, str(tmp_path / "old.onnx"))
    capfd.readouterr()
    _session(tmp_path / "old.onnx")
    log = capfd.readouterr().err
    assert "Initializer gru1/state appears in graph inputs" in log, log
    sessions = {form: _session(path) for form, (path, _) in exported.items()}
    log = capfd.readouterr().err
    assert not [line for line in log.splitlines() if "gru1/state" in line], log

    names = ["output", "gru1/state_out"]
    for form, session in sessions.items():
        assert [i.name for i in session.get_inputs()] == ["input", "gru1/state"], form

        def step(c, state, session=session):
            return session.run(names, {"input": np.array([c], np.float32), "gru1/state": state})

        chain(step, sampled, zeros)
    # the optional form's default is zeros: not fed, or fed None, is fed zeros
    x = np.array([sampled.seed], np.float32)
    optional = sessions["optional"]
    fed = optional.run(names, {"input": x, "gru1/state": zeros})
    np.testing.assert_allclose(fed[1], sampled.states[0], atol=1e-4)
    for feed in ({"input": x}, {"input": x, "gru1/state": None}):
        got = optional.run(names, feed)
        assert all(np.array_equal(a, b) for a, b in zip(got, fed, strict=True))
    # and over a batch: the zeros take the batch of the input
    xs = np.array([sampled.seed, 3, 7], np.float32)
    got = optional.run(names, {"input": xs})
    want = sessions["required"].run(
        names, {"input": xs, "gru1/state": np.zeros((3, HIDDEN), np.float32)}
    )
    assert all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))
    # the required form has no default: its state is always fed
    with pytest.raises(ValueError, match="gru1/state"):
        sessions["required"].run(names, {"input": x})
    log = capfd.readouterr().err
    assert not [line for line in log.splitlines() if "[W:" in line and "gru1/state" in line]


@pytest.mark.parametrize("form", ["required", "optional"])
def test_onnx_reference_evaluator_runs_it(exported, sampled, form):
    need_extra("onnx")
    from onnx.reference import ReferenceEvaluator

    ref = ReferenceEvaluator(str(exported[form][0]))
    zeros = np.zeros((1, HIDDEN), np.float32)

    def step(c, state):
        return ref.run(None, {"input": np.array([c], np.float32), "gru1/state": state})

    chain(step, sampled, zeros)
    if form == "optional":  # None fed is the default: zeros
        x = np.array([sampled.seed], np.float32)
        got = ref.run(None, {"input": x, "gru1/state": None})
        fed = ref.run(None, {"input": x, "gru1/state": zeros})
        assert all(np.array_equal(a, b) for a, b in zip(got, fed, strict=True))


def test_onnx2torch_takes_the_state_as_an_argument(exported, sampled):
    """onnx2torch converts the required form (it has no converter for the optional form's
    OptionalHasElement): the module's second argument is the state, as onnxruntime's."""
    onnx = need_extra("onnx")
    onnx2torch = need_extra("onnx2torch")
    torch = need_extra("torch")
    path = exported["required"][0]
    module = onnx2torch.convert(onnx.load(str(path)))
    assert len(inspect.signature(module.forward).parameters) == 2

    def step(c, state):
        with torch.no_grad():
            pred, out = module(torch.tensor([c], dtype=torch.float32), torch.from_numpy(state))
        return pred.numpy(), out.numpy()

    chain(step, sampled, np.zeros((1, HIDDEN), np.float32))
    # any state, any batch: the same as onnxruntime
    rng = np.random.default_rng(0)
    xs = np.array([sampled.seed, 3, 7], np.float32)
    hs = rng.uniform(-1, 1, (3, HIDDEN)).astype(np.float32)
    want = _session(path).run(["output", "gru1/state_out"], {"input": xs, "gru1/state": hs})
    with torch.no_grad():
        got = [t.numpy() for t in module(torch.from_numpy(xs), torch.from_numpy(hs))]
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_allclose(got[1], want[1], atol=1e-5)
