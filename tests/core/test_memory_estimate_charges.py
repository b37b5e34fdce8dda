"""What the layers of LeNet (examples/mnist/conv.conf) charge to the dry-run's memory
estimate beyond their data and gradient buffers, in closed form (issue 31: the estimate
against the measured peak, benchmarks/memory_estimate.py): the convolutions' work buffers,
pooling's argmax and masks, the store pages a reader keeps mapped, numba's JIT compiler once;
and the buffers only training writes, which the test net allocates but never writes, kept
out of the total."""

from __future__ import annotations

import pytest
from conftest import REPO, mnist_example_args
from singa_builtins.layers._pool_kernels import JIT_BYTES
from singa_builtins.stores._files import READ_WINDOW

from singa_core.jobconf.parse import load_job
from singa_core.plugin_host.host import get_host
from singa_core.running.job import prepare_job

F = 4  # bytes of a float32


def _lenet(mnist_stores):
    overrides = [a for a in mnist_example_args(mnist_stores) if a != "-o"]
    cfg = load_job(REPO / "examples" / "mnist" / "conv.conf", overrides)
    return prepare_job(cfg, get_host()).memory


def _scratch(memory, phase: str, layer: str) -> int:
    return memory.rows[(phase, layer)].bytes["scratch"]


def test_convolution_pooling_and_store_charges_in_closed_form(mnist_stores, monkeypatch):
    monkeypatch.setenv("SINGA_NUMBA", "0")  # pooling's numpy path
    memory = _lenet(mnist_stores)
    for phase, b in (("kTrain", 64), ("kTest", 100)):
        trains = phase == "kTrain"
        # conv1 (1x28x28 -> 20x24x24, kernel 5): the full im2col path (C·kw = 5 is too
        # few for row columns): the NCHW input copied to CHWN order, the column buffer
        # (C·kh·kw rows of oH·oW·B columns) and its row of ones, [W | b] and its gradient
        chwn, col, wb = 28 * 28 * b * F, (25 + 1) * 24 * 24 * b * F, 2 * 20 * 26 * F
        assert _scratch(memory, phase, "conv1") == chwn + col + wb
        # conv2 (20x12x12 -> 50x8x8): row columns (C·kw = 100): ones, the column buffer of
        # kw shifts of every input row, the weight as (kh, F, C·kw) rows and, in training,
        # its gradient's rows
        ones, xcol, rows = 8 * 8 * b * F, 20 * 5 * 12 * 8 * b * F, 5 * 50 * 100 * F
        assert _scratch(memory, phase, "conv2") == ones + xcol + rows + rows * trains
        # max pooling, 2x2 windows that tile the input, numpy path: argmax, the comparison
        # mask and the offsets (a byte each per output), written by training alone
        assert _scratch(memory, phase, "pool1") == 3 * 20 * 12 * 12 * b * trains
        assert _scratch(memory, phase, "pool2") == 3 * 50 * 4 * 4 * b * trains
        # relu1's backward mask (a byte per value), in training
        assert _scratch(memory, phase, "relu1") == 500 * b * trains
    # the store pages each data layer's reader keeps mapped: the read window and a page
    # fault's neighbours (64 KiB), the MNIST files being larger
    for phase, name in (("kTrain", "train_data.bin"), ("kTest", "test_data.bin")):
        assert (mnist_stores / name).stat().st_size > READ_WINDOW + (64 << 10)
        assert _scratch(memory, phase, "data") == READ_WINDOW + (64 << 10)
    # the test net's gradients and training-only scratch: allocated, never written, apart
    b = 100
    grads = (20 * 24 * 24 + 20 * 12 * 12 + 50 * 8 * 8 + 50 * 4 * 4 + 500 + 500 + 10) * b * F
    training_only = 5 * 50 * 100 * F + 3 * (20 * 12 * 12 + 50 * 4 * 4) * b + 500 * b
    assert memory.unwritten == grads + training_only
    assert all(r.bytes["grad"] == 0 for (phase, _), r in memory.rows.items() if phase == "kTest")
    assert memory.total == sum(r.total for r in memory.rows.values())
    assert "(numba's JIT compiler)" not in {layer for _, layer in memory.rows}
    assert any("never written" in line for line in memory.table())


def test_numba_kernels_charge_the_compiler_once_and_the_argmax_alone(mnist_stores, monkeypatch):
    pytest.importorskip("numba")
    monkeypatch.setenv("SINGA_NUMBA", "1")
    memory = _lenet(mnist_stores)
    jit = [key for key in memory.rows if key[1] == "(numba's JIT compiler)"]
    assert jit == [("kTrain", "(numba's JIT compiler)")]  # one row for the four layers
    assert memory.rows[jit[0]].bytes["scratch"] == JIT_BYTES
    # the compiled kernels need no masks: the argmax a training forward records, alone
    assert _scratch(memory, "kTrain", "pool1") == 20 * 12 * 12 * 64
    assert _scratch(memory, "kTest", "pool1") == 0
    lines = memory.table()
    assert any(line.strip().startswith("(numba's JIT compiler): ") for line in lines)


@pytest.mark.parametrize("numba_on", ["1", "0"])
def test_a_compiled_momentum_step_charges_the_compiler_once(mnist_stores, monkeypatch, numba_on):
    """kSGD with momentum runs a compiled pass (numba) on the host: RBM1, with no pooling
    layer, charges numba's compiler once, in the layers' row; SINGA_NUMBA=0 nothing."""
    if numba_on == "1":
        pytest.importorskip("numba")
    monkeypatch.setenv("SINGA_NUMBA", numba_on)
    overrides = [
        f"neuralnet.layer[0].store_conf.path={mnist_stores / 'train_data.bin'}",
        f"neuralnet.layer[1].store_conf.path={mnist_stores / 'test_data.bin'}",
    ]
    cfg = load_job(REPO / "examples" / "rbm" / "rbm1.conf", overrides)
    memory = prepare_job(cfg, get_host()).memory
    jit = [key for key in memory.rows if key[1] == "(numba's JIT compiler)"]
    if numba_on == "1":
        assert jit == [("kTrain", "(numba's JIT compiler)")]
        assert memory.rows[jit[0]].bytes["scratch"] == JIT_BYTES
    else:
        assert jit == []
