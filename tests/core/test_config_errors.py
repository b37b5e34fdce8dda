"""job.conf errors: FILE:LINE:COL, what, help; exit 2; no traceback."""

from __future__ import annotations

import pytest
from conftest import mlp_conf, run_singa, write_csv_blobs

from singa_core.errors import SingaError
from singa_core.jobconf.parse import index_locations, load_job, parse_job_text
from singa_core.plugin_host.host import get_host
from singa_core.running.job import prepare_job


def prepare_text(tmp_path, text: str, **kw):
    path = tmp_path / "job.conf"
    path.write_text(text)
    return prepare_job(load_job(path), get_host(), **kw)


def error_of(tmp_path, text: str, **kw) -> SingaError:
    with pytest.raises(SingaError) as info:
        prepare_text(tmp_path, text, **kw)
    return info.value


@pytest.fixture
def good(tmp_path):
    data = write_csv_blobs(tmp_path / "d.csv")
    return mlp_conf(data, tmp_path / "ws")


def line_col(text: str, needle: str, occurrence: int = 0) -> tuple[int, int]:
    pos = -1
    for _ in range(occurrence + 1):
        pos = text.index(needle, pos + 1)
    line = text.count("\n", 0, pos) + 1
    col = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return line, col


def test_unknown_field_suggests_checkpoint_freq(tmp_path, good):
    text = good.replace("checkpoint_freq: 0", "checkpoint_frequency: 100")
    err = error_of(tmp_path, text)
    line, col = line_col(text, "checkpoint_frequency")
    assert (err.where.line, err.where.col) == (line, col)
    assert 'unknown field "checkpoint_frequency" in JobProto' in err.message
    assert 'did you mean "checkpoint_freq"' in err.help


def test_syntax_error_has_location(tmp_path, good):
    text = good.replace("disp_freq: 10", "disp_freq 10 }")
    err = error_of(tmp_path, text)
    assert err.where.line == line_col(text, "disp_freq")[0]
    assert err.help


def test_unknown_enum_value_suggests(tmp_path, good):
    text = good.replace("type: kInnerProduct", "type: kInnerProdcut", 1)
    err = error_of(tmp_path, text)
    assert 'unknown LayerType value "kInnerProdcut"' in err.message
    assert "kInnerProduct" in err.help
    assert err.where.line == line_col(text, "kInnerProdcut")[0]


def test_type_without_plugin_lists_known_types_and_providers(tmp_path, good, monkeypatch):
    # a schema type no installed plugin provides (every built-in one is provided: take one out)
    monkeypatch.delitem(get_host().registry("layer").entries, "kLRN")
    text = good.replace("type: kSTanh", "type: kLRN")
    err = error_of(tmp_path, text)
    assert 'unknown layer type "kLRN"' in err.message
    assert (err.where.line, err.where.col) == line_col(text, "type: kLRN")
    assert any("kSTanh (singa-classic)" in n for n in err.notes)


def test_unknown_user_type(tmp_path, good):
    text = good.replace("type: kSTanh", 'user_type: "kStanh"')
    err = error_of(tmp_path, text)
    assert 'did you mean "kSTanh"' in err.help
    assert err.where.line == line_col(text, 'user_type: "kStanh"')[0]


def test_unknown_srclayer_points_at_it(tmp_path, good):
    text = good.replace('srclayers: "ip1"', 'srclayers: "ip_1"')
    err = error_of(tmp_path, text)
    assert "unknown source layer 'ip_1'" in err.message
    assert (err.where.line, err.where.col) == line_col(text, 'srclayers: "ip_1"')
    assert 'did you mean "ip1"' in err.help


def test_duplicate_layer_names(tmp_path, good):
    text = good.replace('name: "tanh"', 'name: "ip1"').replace(
        'srclayers: "tanh"', 'srclayers: "ip1"'
    )
    err = error_of(tmp_path, text)
    assert "duplicate layer name 'ip1'" in err.message
    assert err.where.line == line_col(text, 'name: "ip1"', 1)[0]


def test_cycle_is_reported(tmp_path, good):
    text = good.replace(
        'srclayers: "data"\n    innerproduct_conf { num_output: 16 }',
        'srclayers: "ip2"\n    innerproduct_conf { num_output: 16 }',
    )
    assert text != good
    err = error_of(tmp_path, text)
    assert "cycle" in err.message and "ip1" in err.message and "ip2" in err.message
    assert err.where.line is not None


def test_share_from_shape_mismatch_at_setup(tmp_path, good):
    text = good.replace(
        'param { name: "w2" init { type: kGaussian std: 0.1 } }',
        'param { name: "w2" share_from: "w1" }',
    )
    err = error_of(tmp_path, text)
    assert "cannot share from 'w1'" in err.message
    assert err.where.line == line_col(text, 'name: "w2"')[0]


def test_share_from_unknown(tmp_path, good):
    text = good.replace(
        'param { name: "w2" init { type: kGaussian std: 0.1 } }',
        'param { name: "w2" share_from: "0#w3" }',
    )
    err = error_of(tmp_path, text)
    assert "unknown param '0#w3'" in err.message
    assert err.where.line == line_col(text, 'share_from: "0#w3"')[0]


def test_missing_data_file_before_training(tmp_path, good):
    text = good.replace(str(tmp_path / "d.csv"), str(tmp_path / "nope.csv"))
    err = error_of(tmp_path, text)
    assert "nope.csv" in err.format()
    assert err.where is not None and err.help


def test_missing_init_method(tmp_path, good):
    text = good.replace(
        'param { name: "w2" init { type: kGaussian std: 0.1 } }', 'param { name: "w2" }'
    )
    err = error_of(tmp_path, text)
    assert "has no init method" in err.message
    assert "init {" in err.help


def test_no_workspace(tmp_path, good):
    text = good.replace(f'cluster {{ workspace: "{tmp_path / "ws"}" }}', "")
    err = error_of(tmp_path, text)
    assert "no workspace" in err.message


def test_missing_job_file(tmp_path):
    with pytest.raises(SingaError) as info:
        load_job(tmp_path / "missing.conf")
    assert "not found" in info.value.message and info.value.help


def test_overrides(tmp_path, good):
    path = tmp_path / "job.conf"
    path.write_text(good)
    cfg = load_job(
        path,
        [
            "train_steps=7",
            "updater.learning_rate.base_lr=0.5",
            "neuralnet.layer[0].store_conf.batchsize=5",
            "cluster.workspace=/tmp/x",
        ],
    )
    assert cfg.job.train_steps == 7
    assert cfg.job.updater.learning_rate.base_lr == 0.5
    assert list(cfg.job.neuralnet.layer[0].store_conf.batchsize) == [5]
    assert cfg.job.cluster.workspace == "/tmp/x"
    with pytest.raises(SingaError) as info:
        load_job(path, ["train_step=7"])
    assert 'did you mean "train_steps"' in info.value.help
    assert "command line" in str(info.value.where)
    with pytest.raises(SingaError):
        load_job(path, ["updater.type=kFoo"])


def test_location_index_paths():
    text = 'a: 1\nneuralnet {\n  layer { name: "x" srclayers: "p" srclayers: "q" }\n}\n'
    locs = index_locations(text)
    assert locs[("neuralnet", 0, "layer", 0, "srclayers", 1)] == (3, 36)
    cfg = parse_job_text('train_steps: 3\nneuralnet { layer { name: "x" } }', "j.conf")
    assert str(cfg.locate("neuralnet.layer[0].name")) == "j.conf:2:21"
    assert str(cfg.locate("neuralnet.layer[0].srclayers[0]")) == "j.conf:2:13"


@pytest.mark.slow
def test_cli_user_error_exit_2_without_traceback(tmp_path, good):
    path = tmp_path / "job.conf"
    path.write_text(good.replace("checkpoint_freq: 0", "checkpoint_frequency: 100"))
    res = run_singa("train", str(path))
    assert res.returncode == 2
    assert "Traceback" not in res.stderr
    assert f"{path}:" in res.stderr and "help: did you mean" in res.stderr
    res = run_singa("train", str(tmp_path / "none.conf"))
    assert res.returncode == 2 and "Traceback" not in res.stderr


def test_layer_without_type(tmp_path, good):
    text = good.replace(' type: kSTanh srclayers: "ip1"', ' srclayers: "ip1"')
    assert text != good
    err = error_of(tmp_path, text)
    assert "layer 'tanh' has no type" in err.message and "user_type" in err.help
    assert err.where.line == line_col(text, 'name: "tanh"')[0]


def test_data_not_matching_store_shape_found_at_setup(tmp_path, good):
    text = good.replace("shape: 4", "shape: 5")
    err = error_of(tmp_path, text)
    assert "has 5 fields, expected a label and 5 values" in err.message
    assert err.where.line == line_col(text, "store_conf")[0]


def test_label_source_without_labels(tmp_path, good):
    text = good.replace('srclayers: "ip2" srclayers: "data"', 'srclayers: "ip2" srclayers: "tanh"')
    err = error_of(tmp_path, text)
    assert "label source" in err.message and "provides no labels" in err.message
    assert err.where.line is not None


def test_bad_checkpoint_path_reported_before_training(tmp_path, good):
    junk = tmp_path / "junk"
    junk.write_bytes(b"\x0fnot a checkpoint at all")
    text = good.replace('name: "small"', f'name: "small"\ncheckpoint_path: "{junk}"')
    err = error_of(tmp_path, text)
    assert str(junk) in str(err.where) and "checkpoint" in err.message and err.help


def test_params_must_match_across_phases(tmp_path, good):
    # the test-phase copy of ip1 is wider than the train-phase one: they share w1
    text = good.replace(
        'layer {\n    name: "ip1" type: kInnerProduct srclayers: "data"\n'
        "    innerproduct_conf { num_output: 16 }",
        'layer {\n    name: "ip1" type: kInnerProduct srclayers: "data" include: kTest\n'
        "    innerproduct_conf { num_output: 17 }",
    )
    assert text != good
    text = text.replace(
        '  layer { name: "tanh"',
        '  layer { name: "ip1" type: kInnerProduct srclayers: "data" include: kTrain\n'
        "    innerproduct_conf { num_output: 16 }\n"
        '    param { name: "w1" init { type: kConstant } }\n'
        '    param { name: "b1" init { type: kConstant } } }\n'
        '  layer { name: "tanh"',
    )
    err = error_of(tmp_path, text)
    assert "param 'w1' has shape (17, 4) in the kTest net but (16, 4)" in err.message
    assert err.where.line == line_col(text, 'param { name: "w1"')[0]
