"""Resource checks before allocation (issue 11 point 3): the memory estimate of the nets,
its limit, and the kinds of the paths a job names."""

from __future__ import annotations

import os

import pytest
from conftest import REPO, mnist_example_args
from typer.testing import CliRunner

from singa_core.commands.cli import app
from singa_core.jobconf.parse import load_job
from singa_core.layer import kTrain
from singa_core.memory import ENV_AVAILABLE, parse_size
from singa_core.plugin_host.host import get_host
from singa_core.running.job import prepare_job

runner = CliRunner()
MNIST = str(REPO / "examples" / "mnist" / "job.conf")


def _dry(*args):
    return runner.invoke(app, ["train", *args, "--dry-run"])


def _user_error(res, *needles):
    assert res.exit_code == 2, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert "Traceback" not in res.output
    for n in needles:
        assert n in res.output, res.output


def test_parse_size():
    assert parse_size("1000") == 1000
    assert parse_size("64K") == 64 << 10
    assert parse_size("1.5G") == 3 << 29
    assert parse_size("2MiB") == 2 << 20
    with pytest.raises(ValueError):
        parse_size("lots")


def test_estimate_per_layer_is_exact_for_the_small_mlp(small_job):
    """Bytes from shapes: data/grad buffers, Param value+gradient, one momentum history;
    the data layer's scratch is the pages of its store that reading keeps mapped (the whole
    file, smaller than the read window)."""
    conf, _ = small_job(batch=20, hidden=16)
    prepared = prepare_job(load_job(conf), get_host())
    rows = prepared.memory.rows
    assert rows[("kTrain", "data")].bytes == {
        "data": 320,
        "grad": 0,
        "params": 0,
        "updater": 0,
        "scratch": (conf.parent / "blobs.csv").stat().st_size,
    }
    # ip1: out 20x16; w1 16x4 and b1 16 (value + gradient); momentum history of both
    assert rows[("kTrain", "ip1")].bytes == {
        "data": 1280,
        "grad": 1280,
        "params": 2 * 4 * (64 + 16),
        "updater": 4 * (64 + 16),
        "scratch": 0,
    }
    assert rows[("kTrain", "ip2")].bytes["updater"] == 4 * (48 + 3)
    assert rows[("kTest", "ip1")].bytes["updater"] == 0  # the servers update train params only
    assert prepared.memory.total == sum(r.total for r in rows.values())


def test_dry_run_prints_the_estimate(small_job):
    conf, _ = small_job()
    res = _dry(str(conf))
    assert res.exit_code == 0, res.output
    assert "memory estimate" in res.output
    assert "kTrain ip1" in res.output and "kTest loss" in res.output
    assert "available" in res.output


def test_huge_batchsize_is_a_located_error_not_a_numpy_traceback():
    """The issue's command: before, numpy's _ArrayMemoryError ('Unable to allocate 2.85 TiB')."""
    res = _dry(MNIST, "-o", "neuralnet.layer[0].store_conf.batchsize=1000000000")
    _user_error(res, "job.conf:27:", "not enough memory", "layer 'data'", "2.9 TiB", "help:")


def test_huge_num_output_is_a_located_error(mnist_stores):
    res = _dry(
        MNIST,
        *mnist_example_args(mnist_stores),
        "-o",
        "neuralnet.layer[2].innerproduct_conf.num_output=1000000000",
    )
    _user_error(res, "job.conf:54:", "not enough memory", "layer 'fc1'")


def test_a_param_too_big_is_refused_before_allocation(small_job, monkeypatch):
    """A weight matrix that does not fit (its layer's data buffer would): located at the
    layer, with the estimate, before numpy allocates it."""
    conf, _ = small_job(hidden=4_000_000, batch=1)  # ip1: out 1x4M (32 MB), w1 4Mx4 (128 MB)
    monkeypatch.setenv(ENV_AVAILABLE, "64M")
    res = _dry(str(conf))
    _user_error(res, "not enough memory", "layer 'ip1'", "param 'w1'", f"${ENV_AVAILABLE}")


def test_the_limit_override_and_the_layer_before(small_job, monkeypatch):
    conf, _ = small_job()
    monkeypatch.setenv(ENV_AVAILABLE, "2K")
    res = _dry(str(conf))
    _user_error(res, "job.conf:", "2.0 KiB is available", "the layers before it need")
    monkeypatch.setenv(ENV_AVAILABLE, "a lot")
    _user_error(_dry(str(conf)), f"${ENV_AVAILABLE}", "is not a size")


# -- path kinds ------------------------------------------------------------------------------
def test_checkpoint_path_that_is_a_folder(small_job):
    """Before: IsADirectoryError traceback."""
    conf, _ = small_job()
    res = _dry(str(conf), "-o", "checkpoint_path=/etc")
    _user_error(res, "command line: -o checkpoint_path=/etc", "/etc is a folder, not a file")


def test_checkpoint_path_that_is_a_device(small_job):
    conf, _ = small_job()
    _user_error(_dry(str(conf), "-o", "checkpoint_path=/dev/null"), "is a device, not a file")


def test_workspace_that_is_a_file_or_under_one(small_job, tmp_path):
    conf, _ = small_job()
    f = tmp_path / "plain"
    f.write_text("x")
    _user_error(
        _dry(str(conf), "-o", f"cluster.workspace={f}"),
        f"command line: -o cluster.workspace={f}",
        "is not a folder",
    )
    # before: accepted by --dry-run, the run itself failed when it wrote its first file
    _user_error(
        _dry(str(conf), "-o", f"cluster.workspace={f}/ws"),
        f"its parent {f} is a file, not a folder",
    )
    _user_error(_dry(str(conf), "--workspace", f"{f}/ws"), "--workspace: error:")


def test_store_path_of_the_wrong_kind(small_job, tmp_path):
    conf, _ = small_job()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # before: opening it blocked forever
    res = _dry(str(conf), "-o", f"neuralnet.layer[0].store_conf.path={fifo}")
    _user_error(res, "is a named pipe, not a file")
    res = _dry(str(conf), "-o", "neuralnet.layer[0].store_conf.path=/dev/zero")
    _user_error(res, "is a device, not a file")
    res = _dry(str(conf), "-o", f"neuralnet.layer[0].store_conf.path={tmp_path}")
    _user_error(res, f"{tmp_path} is a folder")


def test_output_store_path_that_is_a_folder(small_job, tmp_path):
    out = tmp_path / "out.csv"
    out.mkdir()  # before: accepted by --dry-run; the first test pass failed to write it
    conf, _ = small_job(
        extra=f'layer {{ name: "out" type: kCSVOutput srclayers: "ip2" '
        f'store_conf {{ path: "{out}" }} include: kTest }}'
    )
    _user_error(_dry(str(conf)), f"cannot write {out}: is a folder, not a file")


def test_estimate_matches_the_buffers_of_a_convolutional_net(mnist_stores):
    """Every layer's data and gradient buffers, the spatial layers' batch-innermost ones
    included, are in the estimate with their real sizes; the convolutions declare their
    column buffers as scratch. The test net's gradients, never written, are counted apart."""
    from singa_core.netbuilder.net import PHASE_NAMES

    overrides = [a for a in mnist_example_args(mnist_stores) if a != "-o"]
    cfg = load_job(REPO / "examples" / "mnist" / "conv.conf", overrides)
    prepared = prepare_job(cfg, get_host())
    rows = prepared.memory.rows
    test_grads = 0
    for phase, net in prepared.nets.items():
        for layer in net.layers:
            row = rows[(PHASE_NAMES[phase], layer.name)].bytes
            grad = layer.grad.nbytes if layer.grad is not None else 0
            assert row["data"] == layer.data.nbytes, layer.name
            assert row["grad"] == (grad if phase == kTrain else 0), layer.name
            test_grads += grad if phase != kTrain else 0
            if type(layer).__name__.endswith("Convolution"):
                assert row["scratch"] > 0
    assert test_grads > 0 and prepared.memory.unwritten >= test_grads
