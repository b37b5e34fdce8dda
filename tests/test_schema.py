"""The config schema: checked-in modules match proto/*.proto, and the SINGA 0.3 numbers."""

from __future__ import annotations

import importlib
import textwrap

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, text_format
from google.protobuf.descriptor import FieldDescriptor

from singa_core import schema
from singa_core.schema import common_pb2, job_pb2

# ---------------------------------------------------------------------------
# (a) staleness
# ---------------------------------------------------------------------------


def _default_json_name(name: str) -> str:
    # protoc's rule: drop underscores, upper-case the letter after each one.
    out, upper = [], False
    for c in name:
        if c == "_":
            upper = True
        elif upper:
            out.append(c.upper())
            upper = False
        else:
            out.append(c)
    return "".join(out)


def _strip_default_json_names(fields) -> None:
    for f in fields:
        if f.json_name == _default_json_name(f.name):
            f.ClearField("json_name")


def _strip_message(m: descriptor_pb2.DescriptorProto) -> None:
    _strip_default_json_names(m.field)
    _strip_default_json_names(m.extension)
    for n in m.nested_type:
        _strip_message(n)


def _canonical(fdp: descriptor_pb2.FileDescriptorProto) -> descriptor_pb2.FileDescriptorProto:
    """Round-trip through a fresh pool so both sides are serialized the same way.

    The runtime re-serializes descriptors (e.g. float defaults as "0.899999976" rather
    than the source's "0.9") and protoc's descriptor sets carry json_name on every field;
    neither is a difference in the schema.
    """
    pool = descriptor_pool.DescriptorPool()
    fd = pool.AddSerializedFile(fdp.SerializeToString())
    out = descriptor_pb2.FileDescriptorProto()
    out.ParseFromString(fd.serialized_pb)
    for m in out.message_type:
        _strip_message(m)
    _strip_default_json_names(out.extension)
    return out


@pytest.mark.parametrize("module", [job_pb2, common_pb2], ids=["job", "common"])
def test_checked_in_module_matches_proto_source(module) -> None:
    pytest.importorskip("grpc_tools")
    compiled = {f.name: f for f in schema.source_descriptor_set().file}
    checked_in = descriptor_pb2.FileDescriptorProto()
    checked_in.ParseFromString(module.DESCRIPTOR.serialized_pb)
    assert checked_in.name in compiled
    source = compiled[checked_in.name]
    assert _canonical(checked_in) == _canonical(source), (
        f"{module.__name__} is stale: run `python -m singa_core.schema.generate`"
    )


def test_descriptor_names_are_virtual_paths() -> None:
    assert job_pb2.DESCRIPTOR.name == "singa_core/schema/job.proto"
    assert common_pb2.DESCRIPTOR.name == "singa_core/schema/common.proto"
    assert job_pb2.DESCRIPTOR.package == common_pb2.DESCRIPTOR.package == "singa"
    # job.proto and common.proto are independent
    assert list(job_pb2.DESCRIPTOR.dependencies) == []
    assert list(common_pb2.DESCRIPTOR.dependencies) == []


# ---------------------------------------------------------------------------
# (b) numbers and defaults of SINGA 0.3
# ---------------------------------------------------------------------------


def _field(message, name: str) -> FieldDescriptor:
    return message.DESCRIPTOR.fields_by_name[name]


def _all_messages():
    def walk(descs):
        for d in descs:
            yield d
            yield from walk(d.nested_types)

    for module in (job_pb2, common_pb2):
        yield from walk(module.DESCRIPTOR.message_types_by_name.values())


def test_no_required_fields() -> None:
    for msg in _all_messages():
        for f in msg.fields:
            assert not f.is_required, f"{msg.full_name}.{f.name} must be optional"


@pytest.mark.parametrize(
    ("message", "name", "number"),
    [
        (job_pb2.JobProto, "name", 1),
        (job_pb2.JobProto, "neuralnet", 3),
        (job_pb2.JobProto, "train_one_batch", 5),
        (job_pb2.JobProto, "updater", 7),
        (job_pb2.JobProto, "cluster", 9),
        (job_pb2.JobProto, "train_steps", 16),
        (job_pb2.JobProto, "checkpoint_freq", 30),
        (job_pb2.JobProto, "checkpoint_path", 60),
        (job_pb2.JobProto, "id", 92),
        (job_pb2.LayerProto, "store_conf", 100),
        (job_pb2.LayerProto, "lmdbdata_conf", 190),
        (job_pb2.LayerProto, "sharddata_conf", 194),
        (job_pb2.LayerProto, "activation_conf", 200),
        (job_pb2.LayerProto, "innerproduct_conf", 205),
        (job_pb2.LayerProto, "bm_conf", 217),
        (job_pb2.LayerProto, "softmaxloss_conf", 301),
        (job_pb2.LayerProto, "argsort_conf", 401),
        (job_pb2.LayerProto, "split_conf", 504),
        (job_pb2.LayerProto, "rnn_dummy_conf", 505),
        (job_pb2.LayerProto, "partition_dim", 60),
        (job_pb2.UpdaterProto, "learning_rate", 11),
        (job_pb2.UpdaterProto, "clip_high", 37),
        (job_pb2.LRGenProto, "inverset_conf", 45),
        (job_pb2.StepProto, "gamma", 35),
        (job_pb2.StepProto, "change_freq", 40),
        (job_pb2.FixedStepProto, "step_lr", 29),
        (job_pb2.ClusterProto, "poll_time", 81),
        (job_pb2.ConvolutionProto, "workspace_byte_limit", 50),
        (job_pb2.PoolingProto, "stride_y", 48),
        (job_pb2.LRNProto, "knorm", 34),
        (job_pb2.StoreProto, "prefetching", 13),
        (common_pb2.BlobProtos, "blob", 5),
        (common_pb2.Record, "image", 5),
    ],
)
def test_field_numbers(message, name: str, number: int) -> None:
    assert _field(message, name).number == number


@pytest.mark.parametrize(
    ("message", "name", "default"),
    [
        (job_pb2.JobProto, "reset_param_version", True),
        (job_pb2.JobProto, "num_openblas_threads", 1),
        (job_pb2.JobProto, "id", -1),
        (job_pb2.AlgProto, "alg", job_pb2.kUserAlg),
        (job_pb2.LayerProto, "type", job_pb2.kUserLayer),
        (job_pb2.LayerProto, "partition_dim", -1),
        (job_pb2.LayerProto, "unroll_len", 1),
        (job_pb2.ParamProto, "owner", -1),
        (job_pb2.ParamGenProto, "type", job_pb2.kUserInit),
        (job_pb2.ParamGenProto, "high", 1.0),
        (job_pb2.ParamGenProto, "low", -1.0),
        (job_pb2.ParamGenProto, "std", 1.0),
        (job_pb2.ParamGenProto, "value", 1.0),
        (job_pb2.UpdaterProto, "type", job_pb2.kUserUpdater),
        (job_pb2.LRGenProto, "type", job_pb2.kUserChange),
        (job_pb2.StepProto, "gamma", 1.0),
        (job_pb2.InverseProto, "pow", 0.0),
        (job_pb2.PoolingProto, "stride", 2),
        (job_pb2.PoolingProto, "stride_x", 2),
        (job_pb2.PoolingProto, "kernel", 3),
        (job_pb2.PoolingProto, "pool", job_pb2.PoolingProto.MAX),
        (job_pb2.ConvolutionProto, "kernel", 3),
        (job_pb2.ConvolutionProto, "stride", 1),
        (job_pb2.ClusterProto, "nworker_groups", 1),
        (job_pb2.ClusterProto, "sync_freq", 1),
        (job_pb2.ClusterProto, "share_memory", True),
        (job_pb2.ClusterProto, "poll_time", 100),
        (job_pb2.ClusterProto, "start_port", 6723),
        (job_pb2.ClusterProto, "server_worker_separate", False),
        (job_pb2.LRNProto, "local_size", 5),
        (job_pb2.LRNProto, "knorm", 1.0),
        (job_pb2.ActivationProto, "type", job_pb2.RELU),
        (job_pb2.StoreProto, "separator", ","),
        (job_pb2.StoreProto, "has_label", True),
        (job_pb2.CharRNNProto, "unroll_len", 50),
        (job_pb2.EmbeddingProto, "feature_dim", 100),
        (job_pb2.SoftmaxLossProto, "topk", 1),
        (job_pb2.DropoutProto, "dropout_ratio", 0.5),
        (common_pb2.SingaProto, "zookeeper_host", "localhost:2181"),
        (common_pb2.SingaProto, "log_dir", "/tmp/singa-log/"),
        (common_pb2.Record, "type", common_pb2.Record.kSingleLabelImage),
    ],
)
def test_defaults(message, name: str, default) -> None:
    assert getattr(message(), name) == default


@pytest.mark.parametrize(
    ("message", "name", "default"),
    [
        (job_pb2.LRGenProto, "base_lr", 0.01),
        (job_pb2.UpdaterProto, "delta", 1e-8),
        (job_pb2.AdamProto, "beta1", 0.9),
        (job_pb2.AdamProto, "beta2", 0.999),
        (job_pb2.AdamMaxProto, "beta2", 0.999),
        (job_pb2.AdaDeltaProto, "rho", 0.9),
        (job_pb2.LRNProto, "beta", 0.75),
    ],
)
def test_float_defaults(message, name: str, default: float) -> None:
    assert getattr(message(), name) == pytest.approx(default, rel=1e-6)


def test_labels_and_types() -> None:
    assert _field(job_pb2.StoreProto, "batchsize").is_repeated
    assert _field(job_pb2.StoreProto, "batchsize").type == FieldDescriptor.TYPE_INT32
    assert not _field(job_pb2.StoreProto, "mean_value").is_repeated
    assert _field(job_pb2.JobProto, "gpu").is_repeated
    assert _field(job_pb2.LayerProto, "include").enum_type.name == "Phase"
    for name in ("id", "version", "name", "blob"):
        assert _field(common_pb2.BlobProtos, name).is_repeated
    data = _field(common_pb2.RecordProto, "data")
    assert data.is_repeated
    assert data.type == FieldDescriptor.TYPE_FLOAT
    assert data.is_packed
    assert _field(common_pb2.BlobProto, "data").is_packed
    assert not _field(common_pb2.CaffeDatum, "float_data").is_packed
    # the singa-py addition
    seed = _field(job_pb2.JobProto, "seed")
    assert (seed.number, seed.type) == (201, FieldDescriptor.TYPE_INT64)
    assert not job_pb2.JobProto().HasField("seed")


def test_enum_values() -> None:
    assert job_pb2.kInnerProduct == 205
    assert job_pb2.kSTanh == 212
    assert job_pb2.kCudnnBM == 255
    assert job_pb2.kUserLayer == 600
    assert job_pb2.kRecordInput == 103
    assert job_pb2.kSoftmaxLoss == 301
    assert job_pb2.kRNNDummy == 505
    assert "kPrefetch" not in job_pb2.LayerType.keys()
    assert (job_pb2.kTrain, job_pb2.kTest, job_pb2.kAggGrad) == (1, 4, 512)
    assert job_pb2.kDeploy == 256
    assert job_pb2.kUniformSqrtFanInOut == 6
    assert job_pb2.kUserInit == 101
    assert 3 not in job_pb2.InitMethod.values()
    assert job_pb2.kFixedStep == 6
    assert job_pb2.kUserChange == 100
    assert job_pb2.kAdamMax == 7
    assert job_pb2.kUserUpdater == 105
    assert job_pb2.kUserAlg == 104
    assert job_pb2.kBPTT == 3
    assert job_pb2.kUser == 103
    assert job_pb2.kUnrollCustomized == 4
    assert (job_pb2.RELU, job_pb2.SIGMOID, job_pb2.TANH, job_pb2.STANH) == (1, 2, 3, 4)
    assert (job_pb2.PoolingProto.MAX, job_pb2.PoolingProto.AVG) == (0, 1)
    assert common_pb2.kMetric == 11
    assert common_pb2.kRuntime == 4
    assert common_pb2.kOneToMany == 2


@pytest.mark.parametrize(
    ("message", "start", "end"),
    [
        (job_pb2.JobProto, 101, 200),
        (job_pb2.AlgProto, 101, 200),
        (job_pb2.LayerProto, 1001, 1100),
        (job_pb2.ParamProto, 101, 200),
        (job_pb2.ParamGenProto, 101, 200),
        (job_pb2.UpdaterProto, 101, 200),
        (job_pb2.LRGenProto, 101, 200),
        (common_pb2.Record, 101, 200),
    ],
)
def test_extension_ranges(message, start: int, end: int) -> None:
    # the descriptor stores end-exclusive ranges
    assert list(message.DESCRIPTOR.extension_ranges) == [(start, end + 1)]


def test_seed_is_outside_the_extension_range() -> None:
    seed = _field(job_pb2.JobProto, "seed").number
    assert all(not (lo <= seed < hi) for lo, hi in job_pb2.JobProto.DESCRIPTOR.extension_ranges)


# ---------------------------------------------------------------------------
# (c) a SINGA-style job.conf parses
# ---------------------------------------------------------------------------

MNIST_MLP_CONF = """
name: "mlp"
train_steps: 1000
test_steps: 10
test_freq: 60
disp_freq: 10
train_one_batch {
  alg: kBP
}
updater {
  type: kSGD
  learning_rate {
    type: kStep
    base_lr: 0.001
    step_conf {
      change_freq: 60
      gamma: 0.997
    }
  }
}
neuralnet {
  layer {
    name: "data"
    type: kRecordInput
    store_conf {
      backend: "kvfile"
      path: "examples/mnist/train_data.bin"
      random_skip: 5000
      batchsize: 64
      shape: 784
      std_value: 127.5
      mean_value: 127.5
    }
    include: kTrain
  }
  layer {
    name: "data"
    type: kRecordInput
    store_conf {
      backend: "kvfile"
      path: "examples/mnist/test_data.bin"
      batchsize: 100
      shape: 784
      std_value: 127.5
      mean_value: 127.5
    }
    include: kTest
  }
  layer {
    name: "fc1"
    type: kInnerProduct
    srclayers: "data"
    innerproduct_conf {
      num_output: 2500
    }
    param {
      name: "w1"
      init {
        type: kUniform
        low: -0.05
        high: 0.05
      }
    }
    param {
      name: "b1"
      init {
        type: kUniform
        low: -0.05
        high: 0.05
      }
    }
  }
  layer {
    name: "tanh1"
    type: kSTanh
    srclayers: "fc1"
  }
  layer {
    name: "loss"
    type: kSoftmaxLoss
    softmaxloss_conf {
      topk: 1
    }
    srclayers: "tanh1"
    srclayers: "data"
  }
}
cluster {
  nworker_groups: 1
  nserver_groups: 1
  workspace: "examples/mnist"
}
"""


def test_parse_mnist_mlp_conf() -> None:
    job = text_format.Parse(MNIST_MLP_CONF, job_pb2.JobProto())
    assert job.name == "mlp"
    assert job.train_steps == 1000
    assert job.train_one_batch.alg == job_pb2.kBP
    lr = job.updater.learning_rate
    assert job.updater.type == job_pb2.kSGD
    assert lr.type == job_pb2.kStep
    assert lr.base_lr == pytest.approx(0.001)
    assert lr.step_conf.change_freq == 60
    assert lr.step_conf.gamma == pytest.approx(0.997)
    layers = job.neuralnet.layer
    assert [ly.name for ly in layers] == ["data", "data", "fc1", "tanh1", "loss"]
    train_data = layers[0]
    assert list(train_data.include) == [job_pb2.kTrain]
    assert list(train_data.store_conf.batchsize) == [64]
    assert list(train_data.store_conf.shape) == [784]
    assert train_data.store_conf.separator == ","  # default
    fc1 = layers[2]
    assert fc1.type == job_pb2.kInnerProduct
    assert fc1.innerproduct_conf.num_output == 2500
    assert fc1.param[0].init.type == job_pb2.kUniform
    assert fc1.param[0].init.low == pytest.approx(-0.05)
    assert fc1.param[0].lr_scale == 1.0  # default
    assert list(layers[4].srclayers) == ["tanh1", "data"]
    assert job.cluster.workspace == "examples/mnist"
    assert job.cluster.nworkers_per_group == 1  # default
    assert not job.HasField("seed")
    # round trip
    again = text_format.Parse(text_format.MessageToString(job), job_pb2.JobProto())
    assert again == job


def test_unknown_field_is_rejected() -> None:
    with pytest.raises(text_format.ParseError) as err:
        text_format.Parse("checkpoint_frequency: 3", job_pb2.JobProto())
    assert "checkpoint_frequency" in str(err.value)


def test_singa_conf_parses() -> None:
    conf = text_format.Parse(
        'zookeeper_host: "node0:2181" log_dir: "/var/log/singa"', common_pb2.SingaProto()
    )
    assert conf.zookeeper_host == "node0:2181"
    assert common_pb2.SingaProto().log_dir == "/tmp/singa-log/"


def test_checkpoint_blobprotos_round_trip() -> None:
    protos = common_pb2.BlobProtos()
    for i, name in enumerate(["0#w1", "0#b1"]):
        protos.name.append(name)
        protos.version.append(10 + i)
        blob = protos.blob.add()
        blob.shape.extend([2, 3])
        blob.data.extend([0.5] * 6)
    again = common_pb2.BlobProtos.FromString(protos.SerializeToString())
    assert list(again.name) == ["0#w1", "0#b1"]
    assert list(again.version) == [10, 11]
    assert list(again.blob[1].data) == [0.5] * 6


# ---------------------------------------------------------------------------
# (d) third-party plugin protos
# ---------------------------------------------------------------------------

PLUGIN_PROTO = """
syntax = "proto2";

package singa_test_schema_plugin;

import "singa_core/schema/job.proto";

message FooProto {
  optional float alpha = 1 [default = 1];
}

extend singa.LayerProto {
  optional FooProto foo_conf = 1001;
}
"""


def test_compile_plugin_protos(tmp_path, monkeypatch) -> None:
    pytest.importorskip("grpc_tools")
    src = tmp_path / "src"
    src.mkdir()
    (src / "singa_test_schema_foo.proto").write_text(textwrap.dedent(PLUGIN_PROTO))
    out = tmp_path / "out"
    schema.compile_plugin_protos([str(src / "singa_test_schema_foo.proto")], str(out))
    assert (out / "singa_test_schema_foo_pb2.py").is_file()

    monkeypatch.syspath_prepend(str(out))
    foo_pb2 = importlib.import_module("singa_test_schema_foo_pb2")
    net = text_format.Parse(
        """
        layer {
          name: "x"
          user_type: "kFoo"
          [singa_test_schema_plugin.foo_conf] { alpha: 2 }
        }
        """,
        job_pb2.NetProto(),
    )
    layer = net.layer[0]
    assert layer.type == job_pb2.kUserLayer
    assert layer.user_type == "kFoo"
    assert layer.Extensions[foo_pb2.foo_conf].alpha == 2.0
    assert job_pb2.LayerProto().Extensions[foo_pb2.foo_conf].alpha == 1.0


def test_compile_plugin_protos_reports_protoc_errors(tmp_path) -> None:
    pytest.importorskip("grpc_tools")
    from singa_core.errors import SingaError

    bad = tmp_path / "singa_test_schema_bad.proto"
    bad.write_text(
        'syntax = "proto2";\n'
        'import "singa_core/schema/job.proto";\n'
        "extend singa.LayerProto { optional int32 bad_conf = 50; }\n"
    )
    with pytest.raises(SingaError) as err:
        schema.compile_plugin_protos([str(bad)], str(tmp_path / "out"))
    text = str(err.value)
    assert "singa_test_schema_bad.proto" in text
    assert "extension" in text.lower()  # protoc's own message
    assert "help:" in text


def test_missing_proto_file_is_a_user_error(tmp_path) -> None:
    from singa_core.errors import SingaError

    with pytest.raises(SingaError, match="no such .proto file"):
        schema.compile_plugin_protos([str(tmp_path / "nope.proto")], str(tmp_path))


def test_missing_grpc_tools_is_explained(monkeypatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "grpc_tools", None)
    with pytest.raises(RuntimeError, match=r"help: pip install 'singa-classic\[proto\]'"):
        schema.source_descriptor_set()
