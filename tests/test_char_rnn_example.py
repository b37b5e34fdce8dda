"""examples/char-rnn: a CI-sized BPTT training run on tiny-shakespeare, sampling with a
carried hidden state (checked against a numpy greedy decode), and an exact resume."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import REPO, run_singa

from singa_core.running.checkpoint import read_params

JOB = REPO / "examples" / "char-rnn" / "job.conf"
SAMPLE = REPO / "examples" / "char-rnn" / "sample.conf"
HIDDEN = 96


@pytest.fixture(scope="module")
def texts(data_dir, tmp_path_factory):
    from singa_core.commands.datasets import prepare_dataset
    from singa_core.plugin_host.host import get_host

    out = tmp_path_factory.mktemp("tinyshakespeare")
    conv = get_host().get("dataset", "tinyshakespeare")()
    prepare_dataset(conv, out, data_dir / "tinyshakespeare")
    return out


def small(texts, ws, *, steps, unroll=25, batch=32) -> list[str]:
    """Overrides: the example's net, with a smaller GRU and window, on the converted text."""
    sets = {
        "train_steps": steps,
        "disp_freq": 50,
        "test_freq": steps,
        "test_steps": 5,
        "checkpoint_freq": 0,
        "cluster.workspace": ws,
        "neuralnet.unroll_len": unroll,
        "neuralnet.layer[4].gru_conf.dim_hidden": HIDDEN,
        "updater.learning_rate.base_lr": 0.01,
    }
    for i, name in ((0, "train.txt"), (1, "val.txt")):
        sets[f"neuralnet.layer[{i}].char_rnn_conf.path"] = texts / name
        sets[f"neuralnet.layer[{i}].char_rnn_conf.vocab_path"] = texts / "vocab.txt"
        sets[f"neuralnet.layer[{i}].char_rnn_conf.unroll_len"] = unroll
        sets[f"neuralnet.layer[{i}].char_rnn_conf.batchsize"] = batch
    return [a for k, v in sets.items() for a in ("-o", f"{k}={v}")]


def metrics(ws, phase):
    lines = (ws / "metrics.jsonl").read_text().splitlines()
    return [m for m in map(json.loads, lines) if m.get("phase") == phase]


@pytest.fixture(scope="module")
def trained(texts, tmp_path_factory):
    ws = tmp_path_factory.mktemp("char-rnn")
    proc = run_singa("train", str(JOB), "--seed", "0", *small(texts, ws, steps=300))
    assert proc.returncode == 0, proc.stderr
    return ws


@pytest.mark.slow
def test_char_rnn_learns(trained, texts):
    test = metrics(trained, "test")
    assert test[0]["step"] == 0 and test[0]["loss"] == pytest.approx(np.log(65), abs=0.05)
    # `singa test` on the final checkpoint: per character on held-out text, from
    # ln 65 = 4.17 to well below 3 in 300 small steps
    proc = run_singa("test", str(JOB), "--steps", "5", *small(texts, trained, steps=300))
    assert proc.returncode == 0, proc.stderr
    final = float(proc.stdout.split("loss = ")[1].split(",")[0])
    assert final < 2.6
    train = metrics(trained, "train")
    assert train[-1]["loss"] < train[0]["loss"] - 1.4


def gru_decode(params: dict, first: int, n: int) -> str:
    """Greedy decode in float64 numpy with the hidden state carried across steps."""
    p = {k.split("#", 1)[1]: v.astype(np.float64) for k, v in params.items()}

    def sig(x):
        return 1 / (1 + np.exp(-x))

    h = np.zeros(HIDDEN)
    idx, out = first, []
    for _ in range(n):
        x = np.zeros(65)
        x[idx] = 1
        z = sig(p["w_z_hx"] @ x + p["w_z_hh"] @ h + p["b_z"])
        r = sig(p["w_r_hx"] @ x + p["w_r_hh"] @ h + p["b_r"])
        c = np.tanh(r * (p["w_c_hh"] @ h) + p["w_c_hx"] @ x + p["b_c"])
        h = z * h + (1 - z) * c
        idx = int(np.argmax(p["w"] @ h + p["b"]))
        out.append(idx)
    return out


def test_sampling_carries_the_hidden_state(trained, texts):
    ckpt = trained / "checkpoint" / "step300-worker0"
    args = ["--checkpoint", str(ckpt), "--steps", "120"]
    overrides = {
        "neuralnet.layer[2].gru_conf.dim_hidden": HIDDEN,
        "neuralnet.layer[6].char_rnn_conf.vocab_path": texts / "vocab.txt",
        "neuralnet.layer[0].rnn_dummy_conf.high": 1,  # the first input is character 0
    }
    for k, v in overrides.items():
        args += ["-o", f"{k}={v}"]
    proc = run_singa("test", str(SAMPLE), *args)
    assert proc.returncode == 0, proc.stderr
    vocab = (texts / "vocab.txt").read_text()
    params = {r.name: r.value for r in read_params(ckpt)}
    expected = "".join(vocab[i] for i in gru_decode(params, 0, 120))
    printed = proc.stdout.split("\nTest (120 batches")[0]
    assert printed == expected
    assert len(set(expected)) > 5  # a trained model writes more than one repeated letter


@pytest.mark.slow
def test_bptt_resume_continues_exactly(texts, tmp_path):
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    # one thread count for both runs: chosen automatically (by timing trial steps), the two
    # runs could take different counts on a busy machine, and some host paths round
    # differently by thread count (the resumed run takes the count its checkpoint records)
    common = ["--seed", "3", "-o", "num_openblas_threads=2"]
    proc = run_singa("train", str(JOB), *common, *small(texts, whole, steps=6, unroll=5, batch=4))
    assert proc.returncode == 0, proc.stderr
    first = small(texts, parts, steps=3, unroll=5, batch=4)
    assert run_singa("train", str(JOB), *common, *first).returncode == 0
    rest = small(texts, parts, steps=6, unroll=5, batch=4)
    proc = run_singa("train", str(JOB), "--resume", *rest)
    assert proc.returncode == 0, proc.stderr
    a = (whole / "checkpoint" / "step6-worker0").read_bytes()
    b = (parts / "checkpoint" / "step6-worker0").read_bytes()
    assert a == b


@pytest.mark.slow  # a `singa time` process: about 5 s
def test_gru_counts_its_products(texts, tmp_path):
    """`singa time`'s FLOPs of the unrolled GRU (its copies summed): forward the three gates'
    ``x·Wₖᵀ`` and ``h·Uₖᵀ``; backward their weight gradients and the bias's, and, in every
    copy after the first, the gradient for the previous copy's state."""
    unroll, batch = 5, 4
    conf = small(texts, tmp_path / "ws", steps=1, unroll=unroll, batch=batch)
    res = run_singa("time", str(JOB), "-n", "1", "--warmup", "0", "--json", *conf)
    assert res.returncode == 0, res.stderr
    rows = {r["layer"]: r for r in json.loads(res.stdout)["layers"]}
    vocab = rows["onehot"]["shape"][-1]
    h3 = 3 * HIDDEN
    products = 2 * batch * h3 * (vocab + HIDDEN)
    fwd, bwd = rows["gru1"]["flops"]
    assert fwd == unroll * products
    state_grads = (unroll - 1) * 2 * batch * h3 * HIDDEN
    assert bwd == unroll * (products + 2 * batch * h3) + state_grads
