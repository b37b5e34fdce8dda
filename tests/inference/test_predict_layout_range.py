"""Predict is right or refuses: inputs are matched against the deploy net's layout (channels
last only when asked for, no reshape by size alone), inputs far from the range the job was
trained on give a warning naming both ranges, and rows are named by the path as given."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from conftest import mlp_conf, run_singa, write_csv_blobs

from singa_core import Job
from singa_core.errors import SingaError
from singa_core.inference.input_layout import conform, layout_name
from singa_core.inference.input_range import (
    InputRangeWarning,
    ValueRange,
    range_warning,
    trained_range,
)
from singa_core.plugin_host.host import get_host
from singa_core.schema import common_pb2, job_pb2

CIFAR = (3, 32, 32)


def _refused(x, shape, **kw) -> SingaError:
    with pytest.raises(SingaError) as info:
        conform(np.zeros(x), shape, **kw)
    return info.value


def test_channels_last_images_are_refused_with_both_fixes():
    err = _refused((5, 32, 32, 3), CIFAR)
    assert "channels last" in err.message and "(N, 3, 32, 32)" in err.message
    assert "layout='NHWC'" in err.help and "x.transpose(0, 3, 1, 2)" in err.help


def test_channels_last_is_taken_when_asked_for_and_transposed():
    rng = np.random.default_rng(0)
    nhwc = rng.integers(0, 255, size=(4, 32, 32, 3)).astype(np.float32)
    for name in ("NHWC", "channels_last", "nhwc"):
        got = conform(nhwc, CIFAR, layout=name)
        np.testing.assert_array_equal(got, nhwc.transpose(0, 3, 1, 2))
    assert conform(nhwc.transpose(0, 3, 1, 2), CIFAR, layout="NCHW").shape == (4, *CIFAR)
    err = _refused((4, 3, 32, 32), CIFAR, layout="NHWC")  # said NHWC, gave NCHW
    assert "(N, 32, 32, 3)" in err.message
    err = _refused((4, 784), (784,), layout="NHWC")
    assert "not C×H×W images" in err.message
    with pytest.raises(SingaError, match="unknown layout 'HWCN'"):
        layout_name("HWCN")


def test_a_sample_without_its_batch_axis_is_told_x_none():
    err = _refused((784,), (784,))
    assert "without the batch axis" in err.message
    assert "x[None]" in err.help and "(1, 784)" in err.help
    assert "reshape the samples to (784,)" not in err.help


def test_shapes_that_only_match_by_size_are_refused():
    err = _refused((2, 28, 28), (784,))  # was flattened silently
    assert "reshaping by size alone is refused" in err.message
    assert "x.reshape(len(x), 784)" in err.help
    err = _refused((6, 16, 16, 12), CIFAR)
    assert "reshaping by size alone is refused" in err.message
    err = _refused((3, 10), (784,))
    assert "the model takes (N, 784)" in err.message


def test_axes_of_size_one_may_differ():
    assert conform(np.zeros((2, 28, 28)), (1, 28, 28)).shape == (2, 1, 28, 28)
    assert conform(np.zeros((5, 1)), ()).shape == (5,)  # scalar samples (char indices)
    assert conform(np.zeros(5), ()).shape == (5,)


def test_the_range_warning_names_both_ranges():
    raw = ValueRange(0.0, 255.0, "train_data.bin")
    x = np.random.default_rng(1).integers(0, 256, size=(8, 784)).astype(np.float32)
    assert range_warning(x, raw) is None  # raw pixels to a raw-pixel model
    assert range_warning(np.zeros((2, 784)), raw) is None  # a black image: no span to judge
    assert range_warning(x[:, :10] * 0 + 40.0 + np.arange(10), raw) is None  # a dark image
    for normalised in (x / 255, (x - 127.5) / 127.5):
        msg = range_warning(normalised, raw)
        assert msg is not None and "look normalised already" in msg
        assert "[0, 255]" in msg and "train_data.bin" in msg
    msg = range_warning(x, ValueRange(-1.0, 1.0, "norm.csv"))  # raw to a normalised model
    assert msg is not None and "[0, 255]" in msg and "[-1, 1]" in msg and "far beyond" in msg
    assert range_warning(x, None) is None


def _pixel_store(path, rows):
    store = get_host().get("store", "kvfile")()
    store.open(str(path), 0)
    for i, row in enumerate(rows):
        rec = common_pb2.RecordProto(pixel=bytes(row), label=0)
        rec.shape.extend([len(row)])
        store.write(f"{i:05d}".encode(), rec.SerializeToString())
    store.close()


def test_the_trained_range_is_read_from_the_training_records(tmp_path):
    rows = [np.full(16, 3, np.uint8), np.arange(16, dtype=np.uint8) * 15]
    _pixel_store(tmp_path / "train.bin", rows)
    job = job_pb2.JobProto()
    layer = job.neuralnet.layer.add(name="data", include=[job_pb2.kTrain])
    layer.store_conf.path = str(tmp_path / "train.bin")
    layer.store_conf.backend = "kvfile"
    found = trained_range(job, get_host().get)
    assert (found.low, found.high) == (0.0, 225.0) and found.source.endswith("train.bin")
    layer.store_conf.path = str(tmp_path / "missing.bin")
    assert trained_range(job, get_host().get) is None  # unknown: no warning, no error


@pytest.fixture(scope="module")
def blobs_model(tmp_path_factory):
    """A small MLP trained on CSV blobs (values about -6..6), as `singa train` leaves it."""
    tmp = tmp_path_factory.mktemp("blobs")
    data = write_csv_blobs(tmp / "blobs.csv", n=100)
    conf = tmp / "job.conf"
    conf.write_text(mlp_conf(data, tmp / "ws", steps=20, checkpoint_freq=20))
    res = run_singa("train", str(conf), "--seed", "1", "-q")
    assert res.returncode == 0, res.stderr
    return conf, tmp


def test_model_predict_warns_on_a_far_off_range(blobs_model):
    conf, _ = blobs_model
    model = Job.from_file(conf).model()
    assert model.trained_range is not None and model.trained_range.low < 0
    x = np.random.default_rng(2).normal(0, 3, size=(6, 4)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", InputRangeWarning)
        model.predict(x)  # in range: silent
    with pytest.warns(InputRangeWarning, match="far beyond"):
        model.predict(x * 1000)
    with pytest.raises(SingaError, match="without the batch axis"):
        model.predict(x[0])


def test_singa_predict_names_rows_by_path_and_prints_the_range_warning(blobs_model, tmp_path):
    conf, _ = blobs_model
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        np.save(tmp_path / folder / "x.npy", np.ones((1, 4), np.float32))
    res = run_singa("predict", str(conf), str(tmp_path / "a" / "x.npy"), "b/x.npy", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    rows = res.stdout.splitlines()[1:]
    assert rows[0].startswith(str(tmp_path / "a" / "x.npy")) and rows[1].startswith("b/x.npy")
    np.save(tmp_path / "far.npy", np.full((2, 4), 5000.0, np.float32) + np.arange(4))
    res = run_singa("predict", str(conf), str(tmp_path / "far.npy"))
    assert res.returncode == 0, res.stderr
    assert "warning: input values range over [5000, 5003]" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr and "InputRangeWarning" not in res.stderr
    np.save(tmp_path / "wrong.npy", np.ones((2, 2, 2), np.float32))
    res = run_singa("predict", str(conf), str(tmp_path / "wrong.npy"))
    assert res.returncode == 2 and "reshaping by size alone is refused" in res.stderr
    assert "help:" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.slow
def test_resize_notes_a_colour_image_made_grey(blobs_model, tmp_path):
    """The blobs model takes 4 values: a 2x2 one-channel image. A colour PNG is refused
    without --resize and converted with it, with a note saying so."""
    Image = pytest.importorskip("PIL.Image")
    conf, _ = blobs_model
    Image.fromarray(np.full((2, 2, 3), 7, np.uint8)).save(tmp_path / "rgb.png")
    Image.fromarray(np.full((2, 2), 7, np.uint8)).save(tmp_path / "grey.png")
    res = run_singa("predict", str(conf), str(tmp_path / "rgb.png"))
    assert res.returncode == 2 and "image has 3 channel(s) (RGB)" in res.stderr
    res = run_singa("predict", str(conf), str(tmp_path / "rgb.png"), "--resize")
    assert res.returncode == 0, res.stderr
    assert f"note: {tmp_path / 'rgb.png'}: a RGB image made grey" in res.stderr
    res = run_singa("predict", str(conf), str(tmp_path / "grey.png"), "--resize")
    assert res.returncode == 0 and "note:" not in res.stderr
