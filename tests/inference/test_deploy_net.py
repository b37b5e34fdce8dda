"""The deploy net's rules, the Model's contract and the predict/export commands' errors, on a
small MLP that trains in a second."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import run_singa

from singa_core import Job
from singa_core.errors import SingaError
from singa_core.testing import blobs_csv, mlp_job, run_job


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("deploy")
    data = blobs_csv(folder / "blobs.csv", n=300)
    conf = mlp_job(
        data, steps=80, hidden_layer="type: kDropout dropout_conf { dropout_ratio: 0.3 }"
    )
    # an accuracy layer and a file writer beside the loss: both dropped when predicting
    conf = conf.replace(
        '  layer { name: "loss"',
        '  layer { name: "acc" type: kAccuracy srclayers: "ip2" srclayers: "data" }\n'
        '  layer { name: "out" type: kCSVOutput srclayers: "ip2" include: kTest '
        f'store_conf {{ path: "{folder / "pred.csv"}" }} }}\n'
        '  layer { name: "loss"',
    )
    run_job(conf, folder)
    x = np.loadtxt(data, delimiter=",")
    return folder, x[:, 1:].astype(np.float32), x[:, 0].astype(int)


def model_of(folder, **kw):
    return Job.from_file(folder / "job.conf", workspace=folder / "workspace").model(**kw)


def test_the_derived_deploy_net(trained):
    folder, x, y = trained
    model = model_of(folder)
    plan = model.plan
    assert not plan.from_deploy_phase
    assert plan.inputs == ["data"] and plan.output == "loss"
    assert set(plan.dropped) == {"acc", "out"}
    assert plan.replaced == {"loss": "kSoftmax over 'ip2'"}
    assert [layer.name for layer in model.net.layers] == ["data", "ip1", "hidden", "ip2", "loss"]
    assert model.sample_shape == (4,) and model.output_shape == (3,)
    probs = model.predict(x)
    assert probs.shape == (300, 3) and np.allclose(probs.sum(1), 1, atol=1e-6)
    assert (probs.argmax(1) == y).mean() > 0.95
    # predicting allocates no gradient and copies no Param
    assert all(layer.grad is None for layer in model.net.layers)
    assert all(p.grad is None for p in model.net.params)
    assert model.net.by_name["ip1"].weight.value is model.values["w1"]


def test_rows_and_batches(trained):
    folder, x, _ = trained
    model = model_of(folder)
    many = np.tile(x, (34, 1))[:10_000]
    big = model.predict(many)
    # a few rows run on a net of their own size (the next power of two): equal up to
    # float32 rounding; with fixed_passes every pass has `batch` rows: bit-identical
    fixed = model_of(folder, fixed_passes=True)
    assert np.array_equal(fixed.predict(many), big)
    for n in (1, 7, 300):
        assert np.array_equal(fixed.predict(x[:n]), big[:n])
        np.testing.assert_allclose(model.predict(x[:n]), big[:n], rtol=1e-5, atol=1e-6)
    assert [model.pass_rows(n) for n in (1, 2, 3, 7, 33, 64, 65)] == [1, 2, 4, 8, 64, 64, 64]
    assert fixed.pass_rows(1) == 64
    assert np.array_equal(fixed.predict(x[::-1])[::-1], big[:300])
    one = model_of(folder, batch=1)
    assert np.allclose(one.predict(x[:5]), big[:5], atol=1e-6)
    classes = model.predict_classes(x, top_k=2)
    assert classes.shape == (300, 2) and (classes[:, 0] == big[:300].argmax(1)).all()


def test_wrong_inputs_say_what_the_model_takes(trained):
    folder, x, _ = trained
    model = model_of(folder)
    with pytest.raises(SingaError, match=r"takes \(N, 4\)") as exc:
        model.predict(np.zeros((2, 5)))
    assert exc.value.help
    with pytest.raises(SingaError, match="top_k must be between 1 and 3"):
        model.predict_classes(x, top_k=4)
    with pytest.raises(SingaError, match="numbers"):
        model.predict(np.array([["a"] * 4]))


def test_a_kdeploy_phase_is_the_deploy_net(trained, tmp_path):
    folder, x, _ = trained
    text = (
        (folder / "job.conf")
        .read_text()
        .replace(
            '  layer { name: "acc"',
            '  layer { name: "top" type: kArgSort srclayers: "ip2" include: kDeploy '
            "argsort_conf { topk: 2 } }\n"
            '  layer { name: "acc"',
        )
    )
    conf = tmp_path / "job.conf"
    conf.write_text(text)
    model = Job.from_file(conf, workspace=folder / "workspace").model()
    assert model.plan.from_deploy_phase and model.plan.output == "top"
    top = model.predict(x[:10])
    assert top.shape == (10, 2)
    assert np.array_equal(top[:, 0], model_of(folder).predict_classes(x[:10]))


def test_an_euclidean_loss_predicts_its_input():
    from google.protobuf import text_format

    from singa_core.netbuilder.deploy import deploy_job
    from singa_core.plugin_host.host import get_host
    from singa_core.schema import job_pb2

    job = text_format.Parse(
        'neuralnet { layer { name: "d" type: kCSVInput store_conf { path: "x" shape: 3 } } '
        'layer { name: "ip" type: kInnerProduct srclayers: "d" innerproduct_conf { num_output:'
        ' 2 } } layer { name: "l" type: kEuclideanLoss srclayers: "ip" srclayers: "d" } }',
        job_pb2.JobProto(),
    )
    plan = deploy_job(job, get_host().get)
    assert plan.output == "ip" and [la.name for la in plan.job.neuralnet.layer] == ["d", "ip"]


def _plan_error(text):
    from google.protobuf import text_format

    from singa_core.netbuilder.deploy import deploy_job
    from singa_core.plugin_host.host import get_host
    from singa_core.schema import job_pb2

    job = text_format.Parse(text, job_pb2.JobProto())
    with pytest.raises(SingaError) as exc:
        deploy_job(job, get_host().get, lambda path=None: path)
    return exc.value


def test_nets_that_cannot_be_deployed_are_located_errors():
    # an input layer without deploy behaviour (the label layer's 0.1 reader feeds nothing)
    err = _plan_error(
        'neuralnet { layer { name: "d" type: kDummy dummy_conf { input: true '
        'shape: 3 } } layer { name: "ip" type: kInnerProduct srclayers: "d" '
        "innerproduct_conf { num_output: 2 } } }"
    )
    assert "no input layer" in err.message
    # two outputs
    err = _plan_error(
        'neuralnet { layer { name: "d" type: kCSVInput store_conf { path: "x" shape: 3 } } '
        'layer { name: "a" type: kInnerProduct srclayers: "d" innerproduct_conf { num_output: '
        '2 } } layer { name: "b" type: kInnerProduct srclayers: "d" innerproduct_conf { '
        "num_output: 2 } } }"
    )
    assert "2 outputs (a, b)" in err.message and err.help
    # a kept layer reading a dropped one
    err = _plan_error(
        'neuralnet { layer { name: "d" type: kCSVInput store_conf { path: "x" shape: 3 } } '
        'layer { name: "lab" type: kRNNLabel srclayers: "d" } '
        'layer { name: "ip" type: kInnerProduct srclayers: "d" srclayers: "lab" '
        "innerproduct_conf { num_output: 2 } } }"
    )
    assert "'ip'" in err.message or "deploy behaviour" in err.message
    assert str(err.where).startswith("neuralnet.layer[")


def test_dry_run_prints_the_deploy_net(trained):
    folder, _, _ = trained
    res = run_singa(
        "train",
        str(folder / "job.conf"),
        "--dry-run",
        "--deploy",
        "--workspace",
        str(folder / "workspace"),
    )
    assert res.returncode == 0, res.stderr
    assert "kDeploy net (5 layers, batch N):" in res.stdout
    assert "out Nx3" in res.stdout and "dropped: acc, out" in res.stdout


@pytest.mark.slow
def test_predict_command_outputs(trained, tmp_path):
    folder, x, y = trained
    np.save(tmp_path / "x.npy", x[:6])
    np.savetxt(tmp_path / "rows.csv", np.c_[y[:4], x[:4]], delimiter=",", fmt="%.6f")
    args = ["predict", str(folder / "job.conf"), "--workspace", str(folder / "workspace")]
    res = run_singa(*args, str(tmp_path / "x.npy"), str(tmp_path / "rows.csv"), "--top-k", "2")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].split() == ["input", "top-1", "top-2"] and len(lines) == 11
    # rows are named by the path as given
    assert lines[1].startswith(f"{tmp_path / 'x.npy'}[0]")
    assert lines[7].startswith(f"{tmp_path / 'rows.csv'}[0]")
    (folder / "labels.txt").write_text("alpha\nbeta\ngamma\n")
    try:
        out = tmp_path / "p.jsonl"
        res = run_singa(*args, str(tmp_path / "x.npy"), "--output", str(out))
        assert res.returncode == 0, res.stderr
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        model = model_of(folder)
        want = model.predict(x[:6])
        names = ["alpha", "beta", "gamma"]
        assert [r["top"][0][0] for r in rows] == [names[i] for i in want.argmax(1)]
        out = tmp_path / "p.csv"
        assert run_singa(*args, str(tmp_path / "x.npy"), "--output", str(out)).returncode == 0
        assert out.read_text().splitlines()[0] == "input,class,probability"
        out = tmp_path / "p.npz"
        assert run_singa(*args, str(tmp_path / "x.npy"), "--output", str(out)).returncode == 0
        with np.load(out) as saved:
            assert np.array_equal(saved["output"], want)
    finally:
        (folder / "labels.txt").unlink()


@pytest.mark.parametrize(
    "extra,where,text",
    [
        (["--output", "p.txt"], "--output", "FILE.jsonl"),
        (["--top-k", "9"], "--top-k", "3 outputs"),
        (["--checkpoint", "nope"], "nope", "checkpoint not found"),
    ],
)
def test_predict_errors_exit_2_without_traceback(trained, tmp_path, extra, where, text):
    folder, x, _ = trained
    np.save(tmp_path / "x.npy", x[:2])
    res = run_singa(
        "predict",
        str(folder / "job.conf"),
        "--workspace",
        str(folder / "workspace"),
        str(tmp_path / "x.npy"),
        *extra,
        cwd=tmp_path,
    )
    assert res.returncode == 2, res.stderr
    assert res.stderr.startswith(where) and text in res.stderr and "\nhelp: " in res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.slow
def test_predict_reads_images_and_says_how_to_fit_them(tmp_path):
    from PIL import Image

    data = blobs_csv(tmp_path / "b.csv", n=60, dim=16)
    run_job(mlp_job(data, steps=5, dim=16), tmp_path / "img")
    Image.fromarray(np.arange(16, dtype=np.uint8).reshape(4, 4)).save(tmp_path / "ok.png")
    Image.fromarray(np.zeros((8, 8), np.uint8)).save(tmp_path / "big.png")
    args = [
        "predict",
        str(tmp_path / "img" / "job.conf"),
        "--workspace",
        str(tmp_path / "img" / "workspace"),
    ]
    assert run_singa(*args, str(tmp_path / "ok.png")).returncode == 0
    res = run_singa(*args, str(tmp_path / "big.png"))
    assert res.returncode == 2 and "is 8x8, the model takes 4x4" in res.stderr
    assert "--resize" in res.stderr
    assert run_singa(*args, str(tmp_path / "big.png"), "--resize").returncode == 0


def test_export_errors(trained, tmp_path, monkeypatch):
    folder, _, _ = trained
    res = run_singa(
        "export",
        str(folder / "job.conf"),
        "--workspace",
        str(folder / "workspace"),
        "--format",
        "tflite",
        "--out",
        str(tmp_path / "m"),
    )
    assert res.returncode == 2 and "unknown export format 'tflite'" in res.stderr
    from singa_builtins.layers.dropout import DropoutLayer

    from singa_core.inference.onnx_export import export_onnx

    monkeypatch.delattr(DropoutLayer, "to_onnx")
    with pytest.raises(SingaError, match=r"layer 'hidden' \(kDropout\) has no ONNX export"):
        export_onnx(model_of(folder), tmp_path / "m.onnx")
    assert not (tmp_path / "m.onnx").exists()


def test_onnx_export_of_the_mlp(trained, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    onnx = pytest.importorskip("onnx")
    folder, x, _ = trained
    out = tmp_path / "m.onnx"
    res = run_singa(
        "export",
        str(folder / "job.conf"),
        "--workspace",
        str(folder / "workspace"),
        "--out",
        str(out),
    )
    assert res.returncode == 0, res.stderr
    proto = onnx.load(str(out))
    onnx.checker.check_model(proto)
    assert proto.opset_import[0].version >= 17
    inp = proto.graph.input[0]
    assert inp.name == "input" and inp.type.tensor_type.shape.dim[0].dim_param == "N"
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    for n in (1, 7, 300):
        got = session.run(["output"], {"input": x[:n]})[0]
        assert np.abs(got - model_of(folder).predict(x[:n])).max() < 1e-5
