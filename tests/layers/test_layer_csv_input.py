"""kCSVInput: SINGA 0.3's test_csv_input_layer.cc expectations, plus labels, standardisation,
random skip, cycling, resume and errors."""

import json

import numpy as np
import pytest
from singa_builtins.layers.csv_input import CSVInputLayer
from singa_builtins.stores.kvfile import KVFileStore
from singa_builtins.stores.textfile import TextFileStore

from singa_core.errors import SingaError
from singa_core.layer import kDeploy, kForward, kTest, kTrain
from singa_core.testing import GradCase, layer_conf, make_ctx

LINES = ["12,3.2,1,14.1", "2,0.2,0,1.1", "1,2.2,1,4.1"]  # test_csv_input_layer.cc
STORES = {"textfile": TextFileStore, "kvfile": KVFileStore}


def ctx(seed=0, **kw):
    return make_ctx(
        seed,
        get_plugin=lambda kind, name: STORES[name],
        locate=lambda field=None: f"job.conf:{field}",
        **kw,
    )


def write(tmp_path, lines, name="data.csv"):
    path = tmp_path / name
    path.write_text("".join(line + "\n" for line in lines))
    return path


def csv_layer(path, store="", *, seed=0, setup=True, **ctxkw):
    conf = layer_conf(
        f'name: "csv" type: kCSVInput store_conf {{ backend: "textfile" path: "{path}" {store} }}'
    )
    layer = CSVInputLayer(conf, ctx(seed, **ctxkw))
    if setup:
        layer.setup([])
    return layer


def fwd(layer, phase=kTrain):
    layer.forward(phase | kForward, [])
    return layer.data.reshape(-1)


def test_setup(tmp_path):
    assert CSVInputLayer.type_names == ("kCSVInput",)
    layer = csv_layer(write(tmp_path, LINES), "batchsize: 2 shape: 3")
    assert layer.aux.size == 2 and layer.data.size == 6
    assert layer.data.shape == (2, 3) and layer.grad is None and layer.params == []
    assert layer.aux.dtype == np.int32 and layer.data.dtype == np.float32


def test_compute_feature(tmp_path):
    layer = csv_layer(write(tmp_path, LINES), "batchsize: 2 shape: 3")
    data = fwd(layer)
    assert list(layer.aux) == [12, 2]
    assert data[0] == pytest.approx(3.2) and data[2] == pytest.approx(14.1)
    assert data[3] == pytest.approx(0.2) and data[5] == pytest.approx(1.1)
    assert layer.labels() is layer.aux


def test_deploy_reads_no_label(tmp_path):
    layer = csv_layer(write(tmp_path, LINES), "batchsize: 2 shape: 4")
    layer.aux[:] = [-5, -6]
    data = fwd(layer, kDeploy)
    assert data[0] == 12 and data[2] == 1
    assert data[3] == pytest.approx(14.1) and data[5] == pytest.approx(0.2)
    assert list(layer.aux) == [-5, -6]  # untouched


def test_wrap_around(tmp_path):
    layer = csv_layer(write(tmp_path, LINES), "batchsize: 2 shape: 3")
    fwd(layer)
    data = fwd(layer)
    assert data[0] == pytest.approx(2.2) and data[2] == pytest.approx(4.1)
    assert data[3] == pytest.approx(3.2) and data[5] == pytest.approx(14.1)
    assert list(layer.aux) == [1, 12]
    fwd(layer)  # records 2, 3 (= 1, 2)
    assert list(layer.aux) == [2, 1]
    fwd(layer)
    assert list(layer.aux) == [12, 2]


def test_has_label_false(tmp_path):
    path = write(tmp_path, ["0,0,0,1", "0,0,1,0"])
    layer = csv_layer(path, "batchsize: 2 shape: 4 has_label: false")
    assert layer.aux.size == 2 and layer.data.size == 8  # as test_gru_layer.cc's inputs
    np.testing.assert_array_equal(fwd(layer), [0, 0, 0, 1, 0, 0, 1, 0])
    assert layer.labels() is None


def test_separator_characters_and_trailing_separator(tmp_path):
    path = write(tmp_path, ["3;1.5 2", "4 0.5;1;"])
    layer = csv_layer(path, 'batchsize: 2 shape: 2 separator: "; "')
    np.testing.assert_allclose(fwd(layer), [1.5, 2, 0.5, 1])
    assert list(layer.aux) == [3, 4]


def test_crlf_lines_and_float_labels(tmp_path):
    path = tmp_path / "crlf.csv"
    path.write_bytes(b"7.0,1,2\r\n3,4,5\r\n")
    layer = csv_layer(path, "batchsize: 2 shape: 2")
    np.testing.assert_allclose(fwd(layer), [1, 2, 4, 5])
    assert list(layer.aux) == [7, 3]


def test_mean_and_std_values(tmp_path):
    layer = csv_layer(write(tmp_path, LINES), "batchsize: 3 shape: 3 mean_value: 1 std_value: 2")
    x = np.array([[3.2, 1, 14.1], [0.2, 0, 1.1], [2.2, 1, 4.1]])
    np.testing.assert_allclose(fwd(layer).reshape(3, 3), (x - 1) / 2, rtol=1e-6)


def test_mean_and_std_files(tmp_path):
    mean = write(tmp_path, ["1,2,3"], "mean.csv")
    std = write(tmp_path, ["2,4,0.5"], "std.csv")
    layer = csv_layer(
        write(tmp_path, LINES),
        f'batchsize: 1 shape: 3 mean_file: "{mean}" std_file: "{std}" '
        "mean_value: 100 std_value: 100",
    )  # files take precedence
    np.testing.assert_allclose(
        fwd(layer), [(3.2 - 1) / 2, (1 - 2) / 4, (14.1 - 3) / 0.5], rtol=1e-6
    )


def test_mean_only(tmp_path):
    layer = csv_layer(write(tmp_path, LINES), "batchsize: 1 shape: 3 mean_value: 0.5")
    np.testing.assert_allclose(fwd(layer), [2.7, 0.5, 13.6], rtol=1e-6)


def test_random_skip_once_from_ctx_rng(tmp_path):
    path = write(tmp_path, [f"{i},{i}" for i in range(10)])
    for seed in range(6):
        skip = int(np.random.default_rng(seed).integers(0, 7 + 1))
        layer = csv_layer(path, "batchsize: 3 shape: 1 random_skip: 7", seed=seed)
        fwd(layer)
        assert list(layer.aux) == [(skip + i) % 10 for i in range(3)]
        fwd(layer)  # no further skipping
        assert list(layer.aux) == [(skip + 3 + i) % 10 for i in range(3)]


def test_random_skip_larger_than_the_store_wraps(tmp_path):
    path = write(tmp_path, ["0,0", "1,1"])
    seed = next(s for s in range(100) if np.random.default_rng(s).integers(0, 6) == 5)
    layer = csv_layer(path, "batchsize: 1 shape: 1 random_skip: 5", seed=seed)
    fwd(layer)
    assert list(layer.aux) == [1]  # skipped 5 = 2 + 2 + 1


def test_state_dict_resume(tmp_path):
    path = write(tmp_path, [f"{i},{i}" for i in range(7)])
    a = csv_layer(path, "batchsize: 3 shape: 1 random_skip: 4", seed=3)
    fwd(a)
    fwd(a)
    state = json.loads(json.dumps(a.state_dict()))
    assert state["skipped"] is True
    b = csv_layer(path, "batchsize: 3 shape: 1 random_skip: 4", seed=99)
    b.load_state_dict(state)
    for _ in range(4):
        np.testing.assert_array_equal(fwd(b), fwd(a))
        np.testing.assert_array_equal(b.aux, a.aux)


def test_state_before_first_read_still_skips(tmp_path):
    path = write(tmp_path, [f"{i},{i}" for i in range(7)])
    a = csv_layer(path, "batchsize: 2 shape: 1 random_skip: 4", seed=3)
    state = a.state_dict()
    assert state == {"position": 0, "skipped": False}
    b = csv_layer(path, "batchsize: 2 shape: 1 random_skip: 4", seed=3)
    b.load_state_dict(state)
    np.testing.assert_array_equal(fwd(b), fwd(a))


def test_partitioned_batch(tmp_path):
    path = write(tmp_path, LINES)
    for pdim, store, kw, want in [
        (0, "batchsize: 4", {"num_partitions": 2}, 2),
        (0, "batchsize: 3 batchsize: 1", {"num_partitions": 2, "partition_id": 1}, 1),
        (0, "batchsize: 3 batchsize: 1", {"num_partitions": 2, "partition_id": 0}, 3),
        (1, "batchsize: 4", {"num_partitions": 2}, 4),
        (-1, "batchsize: 4", {"num_partitions": 2}, 4),
    ]:
        layer = csv_layer(path, store + " shape: 3", setup=False, **kw)
        layer.conf.partition_dim = pdim
        layer.setup([])
        assert layer.data.shape == (want, 3), (pdim, store)


def test_test_phase_reads_labels(tmp_path):
    layer = csv_layer(write(tmp_path, LINES), "batchsize: 1 shape: 3")
    fwd(layer, kTest)
    assert list(layer.aux) == [12]


def error(tmp_path, lines, store, *, phase=kTrain):
    path = write(tmp_path, lines) if lines is not None else tmp_path / "missing.csv"
    with pytest.raises(SingaError) as exc:
        layer = csv_layer(path, store)
        layer.forward(phase | kForward, [])
    assert exc.value.where.startswith("job.conf:store_conf")  # the block, or its field
    return str(exc.value)


def test_errors(tmp_path):
    assert "missing.csv" in error(tmp_path, None, "batchsize: 1 shape: 3")
    assert "batchsize" in error(tmp_path, LINES, "shape: 3")
    assert "has 4 fields, expected a label and 2 values" in error(
        tmp_path, LINES, "batchsize: 1 shape: 2"
    )
    msg = error(tmp_path, ["1,2,3,4", "1,2"], "batchsize: 2 shape: 3")
    assert "record '1'" in msg and "layer 'csv'" in msg
    assert "not an integer" in error(tmp_path, ["x,1"], "batchsize: 1 shape: 1")
    assert "not a number" in error(tmp_path, ["1,abc"], "batchsize: 1 shape: 1")
    assert "std_value" in error(tmp_path, LINES, "batchsize: 1 shape: 3 std_value: 0")
    assert "no records" in error(tmp_path, [], "batchsize: 1 shape: 3")
    mean = write(tmp_path, ["1,2"], "mean.csv")
    assert "holds 2 values, expected 3" in error(
        tmp_path, LINES, f'batchsize: 1 shape: 3 mean_file: "{mean}"'
    )
    assert "shape must be positive" in error(tmp_path, LINES, "batchsize: 1 shape: 0")


def test_zero_in_std_file_is_an_error(tmp_path):
    std = write(tmp_path, ["1,0,2"], "std.csv")
    assert "zeros" in error(tmp_path, LINES, f'batchsize: 1 shape: 3 std_file: "{std}"')


def test_no_store_conf_and_sources(tmp_path):
    with pytest.raises(SingaError, match="store_conf"):
        CSVInputLayer(layer_conf('name: "csv"'), ctx()).setup([])
    layer = csv_layer(write(tmp_path, LINES), "batchsize: 1 shape: 3")
    with pytest.raises(SingaError, match="0 source"):
        csv_layer(write(tmp_path, LINES), "batchsize: 1 shape: 3", setup=False).setup([layer])


def test_store_plugin_from_the_host(tmp_path):
    pytest.importorskip("singa_core.plugin_host.host")
    from singa_core.plugin_host.host import get_host

    try:
        get_host().get("store", "textfile")
    except SingaError:
        pytest.skip("the singa package's entry points are not installed")
    path = write(tmp_path, LINES)
    conf = layer_conf(
        f'name: "csv" store_conf {{ backend: "textfile" path: "{path}" batchsize: 1 shape: 3 }}'
    )
    layer = CSVInputLayer(conf, make_ctx())  # ctx.get_plugin None: the plugin host is used
    layer.setup([])
    assert fwd(layer)[0] == pytest.approx(3.2)


def _case(tmp_path):
    layer = csv_layer(write(tmp_path, LINES), "batchsize: 2 shape: 3")
    assert layer.grad_for(layer) is None
    return GradCase(layer, [], no_gradient="an input layer: no sources, no gradient")


GRADIENT_CASES = {"kCSVInput": _case}
