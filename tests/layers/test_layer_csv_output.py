"""kCSVOutput: "label,v1,...,vd" lines formatted like std::to_string, label prefix only for
sources with labels, publishing on close / exit, append after close, resume, errors, and a
real `singa train` run writing predictions."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from conftest import mlp_conf, run_singa, write_csv_blobs
from singa_builtins.layers.csv_output import CSVOutputLayer

from singa_core.errors import SingaError
from singa_core.layer import kForward, kTest, kTrain
from singa_core.testing import GradCase, SourceLayer, layer_conf, make_ctx
from tests.layers.test_layer_shard_data import ctx


def csv_out(path, src, store="", *, setup=True):
    conf = layer_conf(f'name: "out" type: kCSVOutput store_conf {{ path: "{path}" {store} }}')
    layer = CSVOutputLayer(conf, ctx())
    if setup:
        layer.setup([src])
    return layer


def run(layer, src, phase=kTest):
    layer.forward(phase | kForward, [src])


def test_lines_with_labels_formatted_like_std_to_string(tmp_path):
    data = np.array(
        [[1.5, -2.25, 1 / 3], [1e10, -4e-7, 0.0], [123.4567891, -0.0, 7e-6]], dtype=np.float32
    )
    src = SourceLayer(data, labels=[3, -1, 12])
    path = tmp_path / "out.csv"
    layer = csv_out(path, src)
    assert CSVOutputLayer.type_names == ("kCSVOutput",)
    assert layer.data is None and layer.params == [] and layer.grad_for(layer) is None
    run(layer, src)
    assert not path.exists()  # written to a temp file until closed
    layer.close()
    assert path.read_text().splitlines() == [
        "3,1.500000,-2.250000,0.333333",
        "-1,10000000000.000000,-0.000000,0.000000",
        "12,123.456787,-0.000000,0.000007",  # float32 123.4567891 is 123.45678710...
    ]
    layer.close()  # idempotent


def test_no_label_prefix_without_labels_and_4d_sources(tmp_path):
    src = SourceLayer(np.arange(8, dtype=np.float32).reshape(2, 2, 1, 2) / 4)
    path = tmp_path / "out.csv"
    layer = csv_out(path, src, 'backend: "textfile"')
    run(layer, src)
    run(layer, src, kTrain)
    layer.close()
    assert path.read_text() == (
        "0.000000,0.250000,0.500000,0.750000\n1.000000,1.250000,1.500000,1.750000\n" * 2
    )


def test_garbage_collection_publishes_and_close_then_append(tmp_path):
    src = SourceLayer(np.ones((1, 2)), labels=[0])
    path = tmp_path / "gc.csv"
    layer = csv_out(path, src)
    run(layer, src)
    del layer
    gc.collect()
    assert path.read_text() == "0,1.000000,1.000000\n"
    layer = csv_out(path, src)
    run(layer, src)
    layer.close()
    src.data[:] = 2
    run(layer, src)  # after close: appends to the published file
    layer.close()
    assert path.read_text() == "0,1.000000,1.000000\n0,2.000000,2.000000\n"


def test_resume_keeps_the_lines_written_before_the_checkpoint(tmp_path):
    src = SourceLayer(np.zeros((2, 1)))
    path = tmp_path / "r.csv"
    layer = csv_out(path, src)
    for v in range(3):
        src.data[:] = v
        run(layer, src)
        if v == 1:
            state = layer.state_dict()
    layer.close()  # the old run got one batch further than its checkpoint
    assert state == {"instances": 4}
    resumed = csv_out(path, src)
    resumed.load_state_dict(state)
    src.data[:] = 9
    run(resumed, src)
    resumed.close()
    assert path.read_text().split() == ["0.000000"] * 2 + ["1.000000"] * 2 + ["9.000000"] * 2


def test_errors(tmp_path):
    src = SourceLayer(np.zeros((2, 3)), labels=[0])
    with pytest.raises(SingaError) as exc:
        csv_out(tmp_path / "x.csv", src, 'backend: "kvfile"')
    assert 'backend "kvfile" is not supported' in exc.value.message
    assert exc.value.help and "kRecordOutput" in exc.value.help
    with pytest.raises(SingaError, match="store_conf.path"):
        CSVOutputLayer(layer_conf('name: "o"'), ctx()).setup([src])
    with pytest.raises(SingaError, match="does not exist"):
        csv_out(tmp_path / "no" / "x.csv", src)
    with pytest.raises(SingaError, match="1 source"):
        csv_out(tmp_path / "x.csv", src, setup=False).setup([])
    layer = csv_out(tmp_path / "x.csv", src)
    with pytest.raises(SingaError, match="provides 1 labels for a batch of 2"):
        run(layer, src)


def test_train_job_writes_test_predictions(tmp_path):
    """A real `singa train` (subprocess): the file is published when the process exits."""
    data = write_csv_blobs(tmp_path / "blobs.csv")
    out = tmp_path / "pred.csv"
    extra = (
        f'layer {{ name: "out" type: kCSVOutput srclayers: "ip2" include: kTest '
        f'store_conf {{ path: "{out}" }} }}'
    )
    conf = tmp_path / "job.conf"
    conf.write_text(mlp_conf(data, tmp_path / "ws", extra=extra))
    res = run_singa("train", str(conf), "--seed", "0")
    assert res.returncode == 0, res.stderr
    lines = out.read_text().splitlines()
    assert len(lines) == 3 * 5 * 20  # tests at steps 0, 30 and the last (60), 5 batches of 20
    assert all(len(line.split(",")) == 3 for line in lines)  # 3 scores, no label
    assert all(len(v.split(".")[1]) == 6 for v in lines[0].split(","))


def _case(tmp_path):
    src = SourceLayer(np.random.default_rng(0).standard_normal((2, 3)), labels=[0, 1])
    layer = CSVOutputLayer(
        layer_conf(f'name: "out" store_conf {{ path: "{tmp_path / "g.csv"}" }}'), make_ctx()
    )
    layer.setup([src])
    return GradCase(layer, [src], no_gradient="an output layer: it writes a file")


GRADIENT_CASES = {"kCSVOutput": _case}
