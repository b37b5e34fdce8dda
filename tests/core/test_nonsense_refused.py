"""Negative counts, sizes and shapes are refused, located (issue 38 point 8): in job.conf
(`nworkers_per_group: -1` ran one worker) and on the command line (`export --sample-shape
-3` was ignored). Every integer field of the schema is either limited
(singa_core/jobconf/limits.py), checked where it is used, or listed here with why a negative
value means something."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from singa_core.commands.cli import app
from singa_core.jobconf.limits import LIMITS
from singa_core.schema import job_pb2

runner = CliRunner()

# (message, field): checked elsewhere, with their own messages (running/job.py, the layers)
CHECKED_ELSEWHERE = {
    ("JobProto", f)
    for f in (
        "train_steps",
        "disp_freq",
        "test_freq",
        "test_steps",
        "validate_freq",
        "validate_steps",
        "checkpoint_freq",
        "keep_checkpoints",
    )
} | {("JobProto", "gpu")}  # a device index: 'cuda:-1' is not a device
# (message, field): a negative value has a meaning, or the field is not a count
MAY_BE_NEGATIVE = {
    ("JobProto", "id"): "the job id, -1 before one is given",
    ("JobProto", "seed"): "a random seed, any int64",
    ("ParamProto", "id"): "set by the net builder",
    ("ParamProto", "owner"): "-1: owns itself",
    ("ParamProto", "partition_dim"): "set by the net builder",
    ("LayerProto", "shift"): "an unrolled copy's offset, set per source",
}


def _int_fields():
    for msg in job_pb2.DESCRIPTOR.message_types_by_name.values():
        for fd in msg.fields:
            if fd.cpp_type in (fd.CPPTYPE_INT32, fd.CPPTYPE_INT64):
                yield msg, fd


def test_every_integer_field_is_limited_checked_or_explained():
    unclassified = [
        f"{msg.name}.{fd.name}"
        for msg, fd in _int_fields()
        if fd.name not in LIMITS.get(msg.full_name, {})
        and (msg.name, fd.name) not in CHECKED_ELSEWHERE
        and (msg.name, fd.name) not in MAY_BE_NEGATIVE
    ]
    assert unclassified == [], "add them to singa_core/jobconf/limits.py or explain them here"


def test_the_limits_name_real_integer_fields():
    for name, fields in LIMITS.items():
        msg = job_pb2.DESCRIPTOR.message_types_by_name[name.split(".")[-1]]
        assert msg.full_name == name
        for field in fields:
            fd = msg.fields_by_name[field]
            assert fd.cpp_type in (fd.CPPTYPE_INT32, fd.CPPTYPE_INT64), f"{name}.{field}"


# repeated messages the small MLP has: layer[1] is ip1, its param[0] is w1
EXISTING = {"singa.NetProto.layer": 1, "singa.LayerProto.param": 0}


def _path_to(message_name: str) -> str:
    """A field path from JobProto to a message of that type (``neuralnet.layer[1].…``)."""
    todo = [(job_pb2.JobProto.DESCRIPTOR, "")]
    seen = set()
    while todo:
        msg, path = todo.pop(0)
        if msg.full_name == message_name:
            return path
        if msg.full_name in seen:
            continue
        seen.add(msg.full_name)
        for fd in msg.fields:
            if fd.message_type is not None:
                step = fd.name
                if fd.is_repeated:
                    if fd.full_name not in EXISTING:
                        continue  # only existing entries can be set by -o
                    step = f"{fd.name}[{EXISTING[fd.full_name]}]"
                todo.append((fd.message_type, f"{path}.{step}" if path else step))
    raise AssertionError(f"no path to {message_name}")


@pytest.fixture(scope="module")
def conf(tmp_path_factory):
    from conftest import mlp_conf, write_csv_blobs

    d = tmp_path_factory.mktemp("nonsense")
    path = d / "job.conf"
    path.write_text(mlp_conf(write_csv_blobs(d / "b.csv"), d / "ws", steps=2))
    return path


CASES = sorted((name, field) for name, fields in LIMITS.items() for field in fields)


@pytest.mark.parametrize(("message", "field"), CASES, ids=[f"{m[6:]}.{f}" for m, f in CASES])
def test_a_value_below_its_limit_is_refused_at_the_override(conf, message, field):
    limit = LIMITS[message][field]
    path = ".".join(p for p in (_path_to(message), field) if p)
    bad = limit.low - 1 if limit.low > -1 else -2
    res = runner.invoke(app, ["train", str(conf), "--dry-run", "-o", f"{path}={bad}"])
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    first, help_ = res.output.splitlines()[:2]
    assert first.startswith(f"command line: -o {path}={bad}: error: "), res.output
    assert f"{field} is {bad}; it must be " in first
    assert help_.startswith(f"help: write e.g. `{field}: ")


def test_a_value_over_its_upper_limit(conf):
    res = runner.invoke(app, ["train", str(conf), "--dry-run", "-o", "cluster.start_port=70000"])
    assert res.exit_code == 2
    assert "cluster.start_port is 70000; it must be from 0 to 65535" in res.output


def test_nworkers_per_group_minus_one_in_the_file(conf, tmp_path):
    text = conf.read_text().replace("cluster {", "cluster {\n  nworkers_per_group: -1\n")
    path = tmp_path / "job.conf"
    path.write_text(text)
    line = text.splitlines().index("  nworkers_per_group: -1") + 1
    res = runner.invoke(app, ["train", str(path), "-q"])
    assert res.exit_code == 2, res.output
    assert res.output.startswith(
        f"{path}:{line}:3: error: cluster.nworkers_per_group is -1; it must be at least 1"
    ), res.output
    assert "help: write e.g. `nworkers_per_group: 1`; left out it is 1" in res.output


def test_a_layer_field_names_its_layer(conf):
    res = runner.invoke(
        app,
        ["train", str(conf), "--dry-run", "-o", "neuralnet.layer[0].store_conf.shape=4,-2"],
    )
    assert res.exit_code == 2
    assert "layer 'data': store_conf.shape[1] is -2; it must be at least 1" in res.output


def test_a_job_built_in_python_is_checked_too(conf):
    from singa_core.jobconf.parse import load_job
    from singa_core.plugin_host.host import get_host
    from singa_core.running.job import prepare_job

    cfg = load_job(conf)
    cfg.job.cluster.nworkers_per_group = -1  # after load_job's own check
    with pytest.raises(Exception) as info:
        prepare_job(cfg, get_host())
    assert "cluster.nworkers_per_group is -1" in str(info.value)


def test_values_in_range_still_pass(conf):
    res = runner.invoke(
        app,
        ["train", str(conf), "--dry-run", "-o", "warmup_steps=0", "-o", "cluster.sync_freq=2"],
    )
    assert res.exit_code == 0, res.output


# -- numeric options of the command line -------------------------------------------------------
@pytest.fixture(scope="module")
def trained(conf):
    res = runner.invoke(app, ["train", str(conf), "-q", "--no-tensorboard", "--seed", "1"])
    assert res.exit_code == 0, res.output
    (conf.parent / "in.csv").write_text("1,2,3,4\n")
    return conf


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["train", "{conf}", "--resume-from", "-3"], "--resume-from is -3; it must be 0 or more"),
        (
            ["train", "{conf}", "--keep-checkpoints", "-1"],
            "--keep-checkpoints is -1; it must be 0 or more",
        ),
        (["test", "{conf}", "--steps", "-3"], "--steps is -3; it must be at least 1"),
        (["test", "{conf}", "--steps", "0"], "--steps is 0; it must be at least 1"),
        (
            ["predict", "{conf}", "{in}", "--sample-shape", "-3"],
            "--sample-shape is -3; it must be at least 1",
        ),
        (
            ["export", "{conf}", "--out", "{out}.safetensors", "--sample-shape", "-3"],
            "--sample-shape is -3; it must be at least 1",
        ),
        (
            ["export", "{conf}", "--out", "{out}.onnx", "--sample-shape", "0"],
            "--sample-shape is 0; it must be at least 1",
        ),
        (
            ["predict", "{conf}", "{in}", "--sample-shape", "3"],
            "--sample-shape [3] is not the data layer's sample shape [4]",
        ),
        (
            ["time", "{conf}", "-n", "-1"],
            "--iterations must be at least 1",
        ),
    ],
)
def test_numeric_options_below_their_limit(trained, args, said):
    d = trained.parent
    args = [a.format(conf=trained, out=d / "m", **{"in": d / "in.csv"}) for a in args]
    res = runner.invoke(app, args)
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    error = next(line for line in res.output.splitlines() if ": error: " in line)
    assert said in error, res.output
    assert error.startswith("--"), error  # located at the option, as the user spelled it
    assert "\nhelp: " in res.output
    assert not (d / "m.safetensors").exists() and not (d / "m.onnx").exists()


def test_a_sample_shape_that_agrees_is_accepted(trained):
    d = trained.parent
    res = runner.invoke(app, ["predict", str(trained), str(d / "in.csv"), "--sample-shape", "4"])
    assert res.exit_code == 0, res.output
