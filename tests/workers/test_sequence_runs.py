"""kBPTT runs all unrolled copies of a layer as one unit (singa_core.sequences: a wide
instance of a row-independent layer, a GRU's run): the same arrays, gradients and
trajectories as copy by copy, on the CPU and the stand-in; the arenas, the plan and its
fallbacks."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import REPO, write_csv_blobs

from singa_core import kernels as kernel_registry
from singa_core.cuda import EmulatedRuntime
from singa_core.device import open_device, to_host
from singa_core.jobconf.parse import load_job
from singa_core.layer import kTrain
from singa_core.netbuilder.sequences import ENV_SWITCH
from singa_core.plugin_host.host import get_host
from singa_core.running.job import prepare_job
from singa_core.running.reporting import Reporter
from singa_core.running.training import pop_net_metrics
from singa_core.sequences import stacked
from singa_core.testing import gpu_skip_reason

GRU_PARAMS = ("w_z_hx", "w_r_hx", "w_c_hx", "w_z_hh", "w_r_hh", "w_c_hh", "b_z", "b_r", "b_c")


def gru_layer(name: str, src: str, hdim: int, nparams: int) -> str:
    params = " ".join(
        f'param {{ name: "{name}_{p}" init {{ type: kUniform low: -0.3 high: 0.3 }} }}'
        for p in GRU_PARAMS[:nparams]
    )
    return (
        f'layer {{ name: "{name}" type: kGRU srclayers: "{src}" '
        f"gru_conf {{ dim_hidden: {hdim} }} {params} }}"
    )


def job_text(data, ws, *, unroll=4, nparams=9, stacked_gru=False, batch=6, act="") -> str:
    """data → (a kDummy per step, which takes gradients) → GRU [→ GRU] [→ act] → IP →
    loss; ``act``: an activation layer's type and conf."""
    top = "gru2" if stacked_gru else "gru"
    second = gru_layer("gru2", "gru", 5, nparams) if stacked_gru else ""
    if act:
        second += f' layer {{ name: "act" srclayers: "{top}" {act} }}'
        top = "act"
    return f"""
name: "runs"
train_steps: 3
train_one_batch {{ alg: kBPTT }}
updater {{ type: kSGD momentum: 0.9 learning_rate {{ type: kFixed base_lr: 0.05 }} }}
neuralnet {{
  unroll_len: {unroll}
  layer {{
    name: "data" type: kCSVInput unroll_len: 1
    store_conf {{ backend: "textfile" path: "{data}" batchsize: {batch} shape: 4 }}
  }}
  layer {{ name: "emb" type: kDummy srclayers: "data" unroll_conn_type: kUnrollOneToAll }}
  {gru_layer("gru", "emb", 7, nparams)}
  {second}
  layer {{
    name: "out" type: kInnerProduct srclayers: "{top}"
    innerproduct_conf {{ num_output: 3 }}
    param {{ name: "w" init {{ type: kUniform low: -0.3 high: 0.3 }} }}
    param {{ name: "b" init {{ type: kUniform low: -0.1 high: 0.1 }} }}
  }}
  layer {{
    name: "loss" type: kSoftmaxLoss srclayers: "out" srclayers: "data"
    unroll_conn_type: kUnrollOneToOne unroll_conn_type: kUnrollOneToAll
  }}
}}
cluster {{ workspace: "{ws}" }}
"""


def engine_for(tmp_path, monkeypatch, *, runs: bool, device="cpu", tag="", text=None, **kw):
    monkeypatch.setenv(ENV_SWITCH, "1" if runs else "0")
    path = tmp_path / f"job{tag}{int(runs)}.conf"
    if text is None:
        data = write_csv_blobs(tmp_path / "d.csv", n=60)
        text = job_text(data, tmp_path / f"ws{tag}{int(runs)}", **kw)
    path.write_text(text)
    host = get_host()
    prepared = prepare_job(load_job(path), host, seed=3, device=open_device(device))
    engine = host.get("engine", "inprocess")(prepared, Reporter(quiet=True))
    engine._init_params()
    loop = engine._loop()
    net = engine.train_net
    net.units()  # the plan, decided under the switch
    return net, engine.worker, loop.stub


def unit_kinds(units) -> set[str]:
    """The classes of the units that stand for copies (wide layers and runs)."""
    return {type(u).__name__ for u in units if getattr(u, "copies", None)}


WIDE_ACTS = {"kReLU": "ReLULayer", "kSigmoid": "SigmoidLayer", "kSTanh": "STanhLayer",
             "kActivation": "ActivationLayer", "kDropout": "DropoutLayer"}  # fmt: skip


def host(a):
    return None if a is None else to_host(a)


def snapshot(net) -> dict[str, np.ndarray]:
    """Every layer's data and grad, and every owner Param's value and gradient."""
    out = {}
    for layer in net.layers:
        for kind in ("data", "grad"):
            a = getattr(layer, kind, None)
            if a is not None and not layer.name.startswith("0#data"):
                out[f"{layer.name}.{kind}"] = host(a)
    for p in net.params:
        if p.is_owner:
            out[f"{p.name}.value"] = host(p.value)
            if p.grad is not None:
                out[f"{p.name}.grad"] = host(p.grad)
    return out


def assert_same(a: dict, b: dict, tol: float) -> None:
    """Within ``tol`` of each array's largest magnitude (sums over the time steps are
    taken in another order)."""
    assert a.keys() == b.keys()
    for k in a:
        scale = max(float(np.abs(a[k]).max(initial=0.0)), 1e-3)
        np.testing.assert_allclose(a[k], b[k], rtol=0, atol=tol * scale, err_msg=k)


VARIANTS = {
    "gru with biases": {},
    "gru, relu": {"act": "type: kReLU"},
    "gru, sigmoid": {"act": "type: kSigmoid"},
    "gru, stanh": {"act": "type: kSTanh"},
    "gru, activation tanh": {"act": "type: kActivation activation_conf { type: TANH }"},
    "gru, dropout": {"act": "type: kDropout dropout_conf { dropout_ratio: 0.3 }"},
    "gru without biases": {"nparams": 6},
    "stacked grus": {"stacked_gru": True},
}


GPU_SKIP = gpu_skip_reason()
DEVICES = [
    "cpu",
    "standin",
    pytest.param(  # the kernels' CUDA code, emulated
        "standin:cuda",
        marks=pytest.mark.skipif(EmulatedRuntime.compiler() is None, reason="no C++ compiler"),
    ),
    pytest.param("cuda", marks=pytest.mark.skipif(GPU_SKIP is not None, reason=GPU_SKIP or "")),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_a_run_gives_the_copies_arrays_and_gradients(tmp_path, monkeypatch, device, variant):
    """On a GPU (.ci/gpu-check) the runs launch the gru_step_* CUDA kernels and cuBLAS."""
    kw = VARIANTS[variant]
    nets = {}
    for runs in (False, True):
        net, worker, stub = engine_for(tmp_path, monkeypatch, runs=runs, device=device, **kw)
        units = net.units()
        kinds = unit_kinds(units)
        if runs:
            assert {"GRURun", "InnerProductLayer", "SoftmaxLossLayer"} <= kinds, kinds
            act = WIDE_ACTS[kw["act"].split()[1]] if "act" in kw else None
            assert bool(kinds & set(WIDE_ACTS.values())) == (act is not None), kinds
            assert act is None or act in kinds, kinds
            assert len(units) < len(net.layers)
        else:
            assert units == net.layers
        # the first step's forward and backward (gradients before the update), then two
        # more steps of updates
        worker.train_one_batch(0, net, stub)
        first = snapshot(net)
        stub.flush()
        for step in (1, 2):
            worker.train_one_batch(step, net, stub)
            stub.flush()
        nets[runs] = (first, snapshot(net), pop_net_metrics(net))
        # a run keeps its own buffers: its copies never make their per-step ones
        grus = [c for c in net.layers if type(c).__name__ == "GRULayer"]
        assert grus and all((c._work is None) == runs for c in grus)
    (a0, a1, am), (b0, b1, bm) = nets[False], nets[True]
    assert_same(a0, b0, 2e-6)
    assert_same(a1, b1, 2e-5)
    assert am.keys() == bm.keys()
    for k in am:
        assert am[k] == pytest.approx(bm[k], rel=1e-5), k


def test_a_longer_window_agrees_over_ten_steps(tmp_path, monkeypatch):
    """A longer window (20 steps) than the variants above, both ways: the Params agree
    after 10 updates."""
    got = {}
    for runs in (False, True):
        net, worker, stub = engine_for(tmp_path, monkeypatch, runs=runs, tag="long", unroll=20)
        for step in range(10):
            worker.train_one_batch(step, net, stub)
            stub.flush()
        got[runs] = {p.name: to_host(p.value) for p in net.params if p.is_owner}
    assert_same(got[False], got[True], 1e-5)


def test_the_arena_hands_each_copy_its_element(tmp_path, monkeypatch):
    net, _, _ = engine_for(tmp_path, monkeypatch, runs=True)
    copies = [net.by_name[f"{i}#gru"] for i in range(4)]
    whole = stacked(copies, "data")
    assert whole is not None and whole.shape == (4, *copies[0].data.shape)
    for i, c in enumerate(copies):
        assert np.shares_memory(whole[i], c.data)
        c.data[...] = i + 1.0
    assert [float(whole[i].mean()) for i in range(4)] == [1.0, 2.0, 3.0, 4.0]
    assert stacked(copies, "grad") is not None
    assert stacked(copies[::-1], "data") is None  # not in time order
    assert stacked(copies[:3], "data") is None  # not all the copies
    assert stacked([net.by_name[f"{i}#out"] for i in range(4)], "data") is not None
    # a layer that is not unrolled has no arena
    assert net.by_name["0#data"].ctx.sequence is None


def test_the_switch_turns_runs_off_and_the_plan_keeps_the_order(tmp_path, monkeypatch):
    net, _, _ = engine_for(tmp_path, monkeypatch, runs=True)
    units = net.units()
    position = {}
    for k, u in enumerate(units):
        for layer in getattr(u, "copies", [u]):
            position[layer.name] = k
    assert set(position) == {layer.name for layer in net.layers}
    for layer in net.layers:
        for src in net.specs[layer.name].srcs:
            assert position[src] <= position[layer.name], (src, layer.name)
    off, _, _ = engine_for(tmp_path, monkeypatch, runs=False, tag="off")
    assert off.units() == off.layers


def test_a_gru_whose_first_copy_has_a_state_source_runs_copy_by_copy(tmp_path, monkeypatch):
    """GRURun needs copy i ≥ 1 fed by copy i − 1 and nothing else as state: a plan asks the
    class and falls back to single copies when it says no."""
    from singa_builtins.layers.gru import GRULayer

    net, _, _ = engine_for(tmp_path, monkeypatch, runs=True)
    copies = [net.by_name[f"{i}#gru"] for i in range(4)]
    srcs = [list(net.srclayers(c)) for c in copies]
    assert GRULayer.sequence_run(copies, srcs) is not None
    srcs[2] = [srcs[2][0], copies[0]]  # fed by another step than the one before
    assert GRULayer.sequence_run(copies, srcs) is None
    srcs = [list(net.srclayers(c)) for c in copies]
    assert GRULayer.sequence_run(copies[::-1], srcs[::-1]) is None


def test_a_carried_state_enters_the_run_and_its_weight_gradient(tmp_path, monkeypatch):
    """h_0 ≠ 0 (a state carried into copy 0): the run's forward and U gradients use it."""
    snaps = {}
    for runs in (False, True):
        net, worker, stub = engine_for(tmp_path, monkeypatch, runs=runs, tag="h0")
        first = net.by_name["0#gru"]
        first.carry_state(net.by_name["0#gru"])  # zeros: still the zero flag off
        assert first._h0_zero is False
        first._h0[...] = np.linspace(-0.5, 0.5, first._h0.size).reshape(first._h0.shape)
        worker.train_one_batch(0, net, stub)
        snaps[runs] = snapshot(net)
    assert_same(snaps[False], snaps[True], 2e-6)


def test_an_evaluation_pass_runs_the_copies_together(tmp_path, monkeypatch):
    net, worker, stub = engine_for(tmp_path, monkeypatch, runs=True, tag="eval")
    worker.train_one_batch(0, net, stub)
    stub.flush()
    pop_net_metrics(net)
    worker.test_one_batch(kTrain, net)  # forward only, with the training net's phase
    got = pop_net_metrics(net)
    assert np.isfinite(got["loss"]) and 0.0 <= got["accuracy"] <= 1.0


def test_a_char_rnn_step_on_a_device_is_a_few_hundred_kernels_and_two_copies(data_dir, tmp_path):
    """examples/char-rnn counted on the stand-in (a GPU's launches, reads and copies): the
    50 time steps cost 4 launches each (a GEMM and a kernel each way) and the rest a few
    dozen; copy by copy it was 1,555 kernels and 100 copies (docs/performance.md)."""
    from singa_core.commands.datasets import prepare_dataset
    from singa_core.testing.launches import count_training_steps

    texts = tmp_path / "texts"
    prepare_dataset(
        get_host().get("dataset", "tinyshakespeare")(), texts, data_dir / "tinyshakespeare"
    )
    overrides = ["neuralnet.layer[4].gru_conf.dim_hidden=32", "checkpoint_freq=0", "test_freq=0"]
    for i, name in ((0, "train.txt"), (1, "val.txt")):
        overrides += [
            f"neuralnet.layer[{i}].char_rnn_conf.path={texts / name}",
            f"neuralnet.layer[{i}].char_rnn_conf.vocab_path={texts / 'vocab.txt'}",
        ]
    c = count_training_steps(REPO / "examples" / "char-rnn" / "job.conf", overrides)
    assert c.reads == 0, c.by_name
    assert c.to_device == 2  # the characters' one-hot rows and the labels, all steps at once
    assert c.kernels <= 225, c.by_name


def test_the_runs_gradients_are_the_objectives_by_finite_differences(tmp_path, monkeypatch):
    """Through the runs alone (GRU, inner product, softmax loss): the gradient the backward
    pass accumulates into the shared Params is d(Σ_t loss_t)/dθ, by central differences."""
    from singa_core.layer import kAggGrad, kBackward, kForward

    net, _, _ = engine_for(tmp_path, monkeypatch, runs=True, tag="fd", unroll=5)
    units = net.units()
    assert unit_kinds(units) >= {"GRURun", "InnerProductLayer", "SoftmaxLossLayer"}
    data = net.by_name["0#data"]
    data.forward(kTrain | kForward, net.srclayers(data))  # one batch, kept
    rest = [u for u in units if u is not data]
    (loss,) = [u for u in rest if type(u).__name__ == "SoftmaxLossLayer"]

    def run_forward():
        for u in rest:
            u.forward(kTrain | kForward, net.srclayers(u))
        return 5 * float(loss.loss)  # the wide loss holds the mean over the 5 steps

    owners = [p for p in net.params if p.is_owner and p.learnable]
    for p in owners:
        p.grad.fill(0.0)
    run_forward()
    for u in reversed(rest):
        u.backward(kTrain | kBackward | kAggGrad, net.srclayers(u))
    rng = np.random.default_rng(0)
    checked = 0
    for p in owners:
        grad = p.grad.copy()
        flat = p.value.reshape(-1)
        for j in rng.choice(flat.size, size=min(4, flat.size), replace=False):
            if abs(grad.reshape(-1)[j]) < 0.02:
                continue
            eps = 1e-2
            keep = flat[j]
            flat[j] = keep + eps
            up = run_forward()
            flat[j] = keep - eps
            down = run_forward()
            flat[j] = keep
            numeric = (up - down) / (2 * eps)
            assert numeric == pytest.approx(float(grad.reshape(-1)[j]), rel=3e-2, abs=2e-3), (
                p.name,
                int(j),
            )
            checked += 1
    assert checked >= 8


def test_the_compiled_host_steps_equal_numpys_bit_for_bit(tmp_path, monkeypatch):
    """The GRU run's host passes compiled with numba and numpy's give identical arrays
    and gradients. Only the run's passes are switched: the rest of the step (the
    updater's momentum step above all, whose numpy path rounds as the BLAS's saxpy does,
    which on OpenBLAS's AVX2 kernels is not fused in the last n mod 32 values: within an
    ulp) runs the same code both times."""
    pytest.importorskip("numba")
    from singa_builtins.layers import _gru_sequence

    from singa_core.jit import Compiled

    compiled_passes = _gru_sequence._PASSES
    snaps = {}
    for flag in ("1", "0"):
        passes = compiled_passes if flag == "1" else Compiled(lambda: False)
        monkeypatch.setattr(_gru_sequence, "_PASSES", passes)
        assert (_gru_sequence.compiled() is not None) == (flag == "1")
        net, worker, stub = engine_for(tmp_path, monkeypatch, runs=True, tag=f"nb{flag}")
        for step in range(2):
            worker.train_one_batch(step, net, stub)
            stub.flush()
        snaps[flag] = snapshot(net)
    assert snaps["1"].keys() == snaps["0"].keys()
    for k in snaps["1"]:
        np.testing.assert_array_equal(snaps["1"][k], snaps["0"][k], err_msg=k)


@pytest.mark.slow
def test_the_step_passes_split_over_two_threads_equal_the_serial_ones_bit_for_bit(
    tmp_path, monkeypatch
):
    """A GRU run's compiled step passes cut into blocks of rows on two host threads give the
    arrays and gradients of the serial passes, bit for bit (only the passes' thread count
    changes: the GEMMs run as before)."""
    numba = pytest.importorskip("numba")
    from singa_builtins.layers import _gru_sequence

    from singa_core import jit

    if numba.config.NUMBA_NUM_THREADS < 2 or not jit.parallel_ready():
        pytest.skip("numba has no pool of two threads here")
    split = _gru_sequence.compiled().split
    calls = []
    for name in ("gates_in", "gates_mid", "gates_out", "backward"):
        fn = getattr(split, name)
        monkeypatch.setattr(split, name, lambda *a, fn=fn, name=name: calls.append(name) or fn(*a))
    monkeypatch.setattr(_gru_sequence, "SPLIT_MIN", 0)  # the test's small net is cut too
    snaps = {}
    for n in (1, 2):
        monkeypatch.setattr(jit, "host_threads", lambda n=n: n)
        net, worker, stub = engine_for(tmp_path, monkeypatch, runs=True, tag=f"split{n}")
        for step in range(2):
            worker.train_one_batch(step, net, stub)
            stub.flush()
        snaps[n] = snapshot(net)
        if n == 1:
            assert calls == []
    assert {"gates_in", "gates_mid", "gates_out", "backward"} <= set(calls)
    assert snaps[1].keys() == snaps[2].keys()
    for k in snaps[1]:
        np.testing.assert_array_equal(snaps[2][k], snaps[1][k], err_msg=k)


def test_device_copies_of_one_source_copy_never_share_an_arena_element():
    """A consumer taking copies i and i − 1 of one source (a shift) gets two device copies
    of copy i: they must not share memory (their gradients differ)."""
    from types import SimpleNamespace

    from singa_core.netbuilder.sequences import transfer_slot
    from singa_core.sequences import SequenceArena, SequenceSlot

    src_arena, dst_arena = SequenceArena(3), SequenceArena(3)

    def copy_of(arena, i):
        return SimpleNamespace(ctx=SimpleNamespace(sequence=SequenceSlot(arena, i)))

    arenas: dict = {}
    same_step = transfer_slot(copy_of(src_arena, 1), copy_of(dst_arena, 1), arenas)
    next_step = transfer_slot(copy_of(src_arena, 1), copy_of(dst_arena, 2), arenas)
    assert same_step.index == next_step.index == 1
    assert same_step.arena is not next_step.arena
    again = transfer_slot(copy_of(src_arena, 2), copy_of(dst_arena, 2), arenas)
    assert again.arena is same_step.arena and again.index == 2


EMBEDDING_JOB = """
name: "words" train_steps: 4 disp_freq: 100 test_steps: 0 checkpoint_freq: 0
train_one_batch {{ alg: kBPTT }}
updater {{ type: kSGD learning_rate {{ type: kFixed base_lr: 0.1 }} }}
neuralnet {{
  unroll_len: 6
  layer {{ name: "data" type: kCharRNN unroll_len: 1
    char_rnn_conf {{ path: "{texts}/train.txt" vocab_path: "{texts}/vocab.txt"
                     batchsize: 8 unroll_len: 6 }} }}
  layer {{ name: "emb" type: kEmbedding srclayers: "data" unroll_conn_type: kUnrollOneToAll
    embedding_conf {{ vocab_size: {vocab} feature_dim: 5 }}
    param {{ name: "v" init {{ type: kUniform low: -0.1 high: 0.1 }} }} }}
  layer {{ name: "label" type: kRNNLabel srclayers: "data" unroll_conn_type: kUnrollOneToAll }}
  {gru}
  layer {{ name: "out" type: kInnerProduct srclayers: "gru"
    innerproduct_conf {{ num_output: {vocab} }}
    param {{ name: "w" init {{ type: kUniform low: -0.1 high: 0.1 }} }}
    param {{ name: "b" init {{ type: kConstant value: 0 }} }} }}
  layer {{ name: "loss" type: kSoftmaxLoss srclayers: "out" srclayers: "label" }}
}}
cluster {{ workspace: "{ws}" }}
"""


def test_an_embedding_on_a_device_checks_its_indices_on_the_host_copy(data_dir, tmp_path):
    """kEmbedding's indices come from the host (the input layer's batch): their range is
    checked there, so a step on a device reads nothing back; a bad index is still an
    error naming the layer."""
    from singa_core.commands.datasets import prepare_dataset
    from singa_core.errors import SingaError
    from singa_core.testing.launches import count_training_steps

    texts = tmp_path / "texts"
    prepare_dataset(
        get_host().get("dataset", "tinyshakespeare")(), texts, data_dir / "tinyshakespeare"
    )
    vocab = len((texts / "vocab.txt").read_text())
    conf = tmp_path / "words.conf"
    conf.write_text(
        EMBEDDING_JOB.format(
            texts=texts, vocab=vocab, ws=tmp_path / "ws", gru=gru_layer("gru", "emb", 6, 9)
        )
    )
    c = count_training_steps(conf)
    assert c.reads == 0, c.by_name
    # run as one: the indices and labels one copy each, the window's 6 steps 64 launches
    # (copy by copy: 12 copies and 241 launches)
    assert c.to_device == 2 and c.kernels <= 64, c.by_name
    # a vocabulary too small for the text's indices: refused, naming the copy that read one
    conf.write_text(
        EMBEDDING_JOB.format(
            texts=texts, vocab=vocab, ws=tmp_path / "ws2", gru=gru_layer("gru", "emb", 6, 9)
        ).replace(f"vocab_size: {vocab}", "vocab_size: 3")
    )
    with pytest.raises(SingaError, match=r"#emb' \(kEmbedding\): index .* outside \[0, 3\)"):
        count_training_steps(conf)


@pytest.mark.parametrize("device", DEVICES)
def test_an_embedding_run_gives_the_copies_arrays_and_gradients(
    data_dir, tmp_path, monkeypatch, device
):
    """A word-level net (kCharRNN → kEmbedding → kGRU → kInnerProduct → kSoftmaxLoss): the
    input layer's steps form one arena, the embedding's copies run as one lookup and one
    scatter-add, the device copies of the indices as one copy; the same arrays and
    gradients as copy by copy."""
    from singa_core.commands.datasets import prepare_dataset

    texts = tmp_path / "texts"
    prepare_dataset(
        get_host().get("dataset", "tinyshakespeare")(), texts, data_dir / "tinyshakespeare"
    )
    vocab = len((texts / "vocab.txt").read_text())
    snaps = {}
    for runs in (False, True):
        text = EMBEDDING_JOB.format(
            texts=texts, vocab=vocab, ws=tmp_path / f"ws{runs}", gru=gru_layer("gru", "emb", 6, 9)
        )
        net, worker, stub = engine_for(tmp_path, monkeypatch, runs=runs, device=device, text=text)
        kinds = unit_kinds(net.units())
        if runs:
            assert "EmbeddingLayer" in kinds and "GRURun" in kinds, kinds
            if device != "cpu":
                assert "DeviceTransfer" in kinds, kinds
        worker.train_one_batch(0, net, stub)
        first = snapshot(net)
        stub.flush()
        worker.train_one_batch(1, net, stub)
        stub.flush()
        snaps[runs] = (first, snapshot(net))
    assert_same(snaps[False][0], snaps[True][0], 2e-6)
    assert_same(snaps[False][1], snaps[True][1], 2e-5)


def onehot_csv(path, n: int = 60, dim: int = 4, seed: int = 0):
    """'label,x1,...,xd' lines whose features are one-hot rows (the label's class)."""
    rng = np.random.default_rng(seed)
    with open(path, "w") as f:
        for _ in range(n):
            hot = int(rng.integers(0, dim))
            f.write(",".join([str(hot % 3)] + ["1" if k == hot else "0" for k in range(dim)]))
            f.write("\n")
    return path


def test_a_gru_run_fed_one_hot_rows_computes_what_its_gemms_compute(tmp_path, monkeypatch):
    """The same GRU run, with its one-hot input found (gather, scatter-add) and with the
    finding turned off (its two GEMMs): equal forward arrays, gradients within float32
    rounding; and the finding really ran."""
    from singa_builtins.layers import _gru_sequence

    data = onehot_csv(tmp_path / "hot.csv")
    snaps, found = {}, {}
    for mode in ("found", "gemm"):
        if mode == "gemm":  # the host's finding says no: the GEMMs run
            finding = kernel_registry.get_kernel("one_hot_rows")
            monkeypatch.setattr(finding, "host", lambda x, idx: None)
            monkeypatch.delitem(kernel_registry._resolved, ("one_hot_rows", "cpu"), raising=False)
        text = job_text(data, tmp_path / f"ws{mode}")
        net, worker, stub = engine_for(tmp_path, monkeypatch, runs=True, tag=mode, text=text)
        worker.train_one_batch(0, net, stub)
        runs = [u for u in net.units() if isinstance(u, _gru_sequence.GRURun)]
        assert runs
        found[mode] = runs[0]._hot_rows is not None
        snaps[mode] = snapshot(net)
    assert found == {"found": True, "gemm": False}
    for k, got in snaps["found"].items():
        want = snaps["gemm"][k]
        if k.endswith(".data"):
            np.testing.assert_array_equal(got, want, err_msg=k)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=k)


def test_blobs_that_are_not_one_hot_keep_the_gemm(tmp_path, monkeypatch):
    from singa_builtins.layers import _gru_sequence

    data = write_csv_blobs(tmp_path / "d.csv", n=60)
    net, worker, stub = engine_for(tmp_path, monkeypatch, runs=True, tag="blobs",
                                   text=job_text(data, tmp_path / "wsb"))  # fmt: skip
    worker.train_one_batch(0, net, stub)
    runs = [u for u in net.units() if isinstance(u, _gru_sequence.GRURun)]
    assert runs and runs[0]._hot_rows is None
