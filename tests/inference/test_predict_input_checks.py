"""What `singa predict` refuses by name instead of a traceback or a silent oddity (issue 30):
an input with no samples (a `(0, 784)` .npy was a TypeError), NaN or infinite values
(printed `0 (nan)`), a FIFO or other non-file (was "no such file"); each exit 2 with the
input and a help line; unit checks of sample_checks."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest
from conftest import run_singa

from singa_core.errors import SingaError
from singa_core.inference.inputs import read_inputs
from singa_core.inference.sample_checks import check_samples, refuse_special_file


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The small CSV MLP (4 inputs, 3 classes), trained 20 steps."""
    from conftest import mlp_conf, write_csv_blobs

    tmp = tmp_path_factory.mktemp("predict")
    conf = tmp / "job.conf"
    conf.write_text(mlp_conf(write_csv_blobs(tmp / "blobs.csv"), tmp / "ws", steps=20))
    res = run_singa("train", str(conf))
    assert res.returncode == 0, res.stderr
    return conf, tmp


def predict(conf, *inputs):
    return run_singa("predict", str(conf), *map(str, inputs))


def test_good_input_predicts(trained):
    conf, tmp = trained
    np.save(tmp / "good.npy", np.ones((2, 4), np.float32))
    res = predict(conf, tmp / "good.npy")
    assert res.returncode == 0, res.stderr
    assert "good.npy[0]" in res.stdout and "nan" not in res.stdout


@pytest.mark.parametrize(
    ("array", "message"),
    [
        (np.zeros((0, 4), np.float32), "input holds no samples (an array of shape (0, 4))"),
        (np.array([[1, 2, 3, 4], [1, np.nan, 3, 4]], np.float32),
         "sample {bad}[1] holds nan at value index 1"),
        (np.array([[np.inf, 2, 3, 4]] * 3, np.float64),
         "sample {bad}[0] holds inf at value index 0 (and 2 more sample(s))"),
        (np.array([1, 2, -np.inf, 4], np.float32), "sample {bad} holds -inf at value index 2"),
    ],
)  # fmt: skip
def test_bad_arrays_are_refused_by_row(trained, array, message):
    conf, tmp = trained
    np.save(tmp / "bad.npy", array)
    res = predict(conf, tmp / "bad.npy")
    assert res.returncode == 2, res.stdout + res.stderr
    message = message.format(bad=tmp / "bad.npy")  # a sample is named by its path as given
    assert f"{tmp / 'bad.npy'}: error: {message}" in res.stderr, res.stderr
    assert "help:" in res.stderr and "Traceback" not in res.stderr and "(nan)" not in res.stdout


@pytest.mark.slow
def test_nan_in_an_npz_member_and_an_empty_csv(trained):
    conf, tmp = trained
    np.savez(tmp / "b.npz", ok=np.ones((1, 4)), odd=np.array([[0, 0, np.nan, 0]]))
    res = predict(conf, tmp / "b.npz")
    bad = f"{tmp / 'b.npz'}[odd]"  # the sample is named by the path as given
    assert res.returncode == 2 and f"{bad}: error: sample {bad}[0]" in res.stderr
    (tmp / "empty.csv").write_text("\n\n")
    res = predict(conf, tmp / "empty.csv")
    assert res.returncode == 2 and "input holds no samples" in res.stderr
    (tmp / "nan.csv").write_text("1,2,3,4\n1,nan,3,4\n")
    res = predict(conf, tmp / "nan.csv")
    assert res.returncode == 2 and f"sample {tmp / 'nan.csv'}[1] holds nan" in res.stderr


def test_a_fifo_is_refused_by_name_without_blocking(trained):
    conf, tmp = trained
    fifo = tmp / "stream.npy"
    os.mkfifo(fifo)
    res = predict(conf, fifo)  # nothing writes into it: reading would block forever
    assert res.returncode == 2, res.stderr
    assert f"{fifo}: error: input is a FIFO (named pipe), not a file" in res.stderr
    assert "help:" in res.stderr and "no such file" not in res.stderr


def test_unit_checks(tmp_path):
    check_samples(["a"], np.ones((1, 3), np.uint8), "x")
    with pytest.raises(SingaError, match="no samples"):
        check_samples([], np.empty((0, 3)), "x")
    refuse_special_file(tmp_path / "missing")  # missing: the reader's own error
    refuse_special_file(tmp_path)  # folders: the reader's own error
    with pytest.raises(SingaError, match="character device"):
        refuse_special_file(__import__("pathlib").Path("/dev/null"))


def test_read_inputs_refuses_a_fifo_with_a_writer(tmp_path):
    """Even with data waiting in it, a FIFO is refused before anything reads it."""
    fifo = tmp_path / "x.npy"
    os.mkfifo(fifo)

    def writer():
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            return  # no reader (the expected case): nothing to write
        os.close(fd)

    t = threading.Thread(target=writer)
    t.start()
    with pytest.raises(SingaError, match="FIFO"):
        read_inputs([fifo], (4,))
    t.join()
