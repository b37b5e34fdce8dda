"""Every built-in layer type with a deploy behaviour exports to ONNX, checked against its own
forward in onnxruntime with the plugin kit's check (singa_core.testing.check_onnx_export)."""

from __future__ import annotations

import numpy as np
import pytest

from singa_core.testing import check_onnx_export

pytest.importorskip("onnxruntime")
rng = np.random.default_rng(7)
IMG = rng.standard_normal((3, 4, 9, 9))  # batch 3, 4 channels, 9x9

CASES = [
    (
        "kInnerProduct",
        'name: "ip" innerproduct_conf { num_output: 5 } param { name: "w" } param { name: "b" }',
        [rng.standard_normal((3, 7))],
    ),
    (
        "kInnerProduct",
        'name: "ipt" innerproduct_conf { num_output: 5 transpose: true } '
        'param { name: "w" } param { name: "b" }',
        [rng.standard_normal((3, 2, 4))],
    ),
    (
        "kConvolution",
        'name: "c" convolution_conf { num_filters: 6 kernel: 3 pad: 1 stride: 2 } '
        'param { name: "w" } param { name: "b" }',
        [IMG],
    ),
    (
        "kCConvolution",
        'name: "cc" convolution_conf { num_filters: 5 kernel_x: 3 kernel_y: 2 '
        'pad_x: 1 pad_y: 0 stride_x: 1 stride_y: 1 } param { name: "w" } param { name: "b" }',
        [IMG],
    ),
    (
        "kCConvolution",
        'name: "gray" convolution_conf { num_filters: 3 kernel: 5 } '
        'param { name: "w" } param { name: "b" }',
        [rng.standard_normal((2, 12, 12))],
    ),
    ("kPooling", 'name: "pm" pooling_conf { pool: MAX kernel: 3 stride: 2 pad: 1 }', [IMG]),
    ("kPooling", 'name: "pa" pooling_conf { pool: AVG kernel: 3 stride: 2 pad: 1 }', [IMG]),
    ("kCPooling", 'name: "cp" pooling_conf { pool: MAX kernel: 3 stride: 2 }', [IMG]),
    ("kCPooling", 'name: "ca" pooling_conf { pool: AVG kernel: 3 stride: 2 }', [IMG]),
    (
        "kLRN",
        'name: "n" lrn_conf { local_size: 3 alpha: 0.0005 beta: 0.75 knorm: 1 }',
        [np.abs(IMG) * 10],
    ),
    ("kReLU", 'name: "r"', [IMG]),
    ("kSTanh", 'name: "t"', [IMG]),
    ("kSigmoid", 'name: "s"', [IMG]),
    ("kSoftmax", 'name: "sm"', [rng.standard_normal((3, 10)) * 4]),
    ("kDropout", 'name: "d" dropout_conf { dropout_ratio: 0.5 }', [IMG]),
    (
        "kConcate",
        'name: "cat" concate_conf { num_concates: 2 concate_dim: 1 }',
        [rng.standard_normal((3, 4)), rng.standard_normal((3, 6))],
    ),
    ("kActivation", 'name: "a1" activation_conf { type: RELU }', [IMG]),
    ("kActivation", 'name: "a2" activation_conf { type: SIGMOID }', [IMG]),
    ("kActivation", 'name: "a3" activation_conf { type: TANH }', [IMG]),
    ("kActivation", 'name: "a4" activation_conf { type: STANH }', [IMG]),
    (
        "kEmbedding",
        'name: "e" embedding_conf { vocab_size: 11 feature_dim: 4 } param { name: "v" }',
        [rng.integers(0, 11, size=(5, 1)).astype(np.float32)],
    ),
    (
        "kArgSort",
        'name: "top" argsort_conf { topk: 3 }',
        [rng.permuted(np.tile(np.arange(8, dtype=np.float32), (4, 1)), axis=1)],
    ),
]

CASES += [
    (
        "kImagePreprocess",
        'name: "crop" rgbimage_conf { cropsize: 5 scale: 0.5 mirror: true }',
        [IMG],
    ),
    ("kImagePreprocess", 'name: "scale" rgbimage_conf { scale: 2 }', [IMG]),
    ("kBM", 'name: "bm" ' + "param { } " * 4, [IMG]),
    ("kBM", 'name: "bm2" ' + "param { } " * 4, [rng.standard_normal((3, 7))]),
    (
        "kOneHot",
        'name: "oh" onehot_conf { vocab_size: 7 }',
        [rng.integers(0, 7, size=(5, 1)).astype(np.float32)],
    ),
    (
        "kGRU",
        'name: "gru" gru_conf { dim_hidden: 6 } ' + "param { } " * 9,
        [rng.standard_normal((4, 5))],
    ),
    (
        "kGRU",
        'name: "gru6" gru_conf { dim_hidden: 6 } ' + "param { } " * 6,
        [rng.standard_normal((4, 5))],
    ),
    (
        "kGRU",
        'name: "gru2" gru_conf { dim_hidden: 6 } ' + "param { } " * 9,
        [rng.standard_normal((4, 5)), rng.standard_normal((4, 6))],
    ),
]


@pytest.mark.parametrize("type_name,conf,sources", CASES, ids=[c[1].split('"')[1] for c in CASES])
def test_export_equals_forward(type_name, conf, sources):
    report = check_onnx_export(type_name, conf, sources)
    assert report.nodes >= 1 or type_name == "kDropout"


def test_the_check_catches_a_wrong_export(monkeypatch):
    from singa_builtins.layers.relu import ReLULayer

    monkeypatch.setattr(ReLULayer, "to_onnx", lambda self, g, i: g.add("Sigmoid", i))
    with pytest.raises(AssertionError, match="differs from forward"):
        check_onnx_export("kReLU", 'name: "r"', [IMG])


def test_a_slice_exports_one_output_per_part():
    """kSlice's parts go to different consumers: the export gives each its own tensor."""
    onnx = pytest.importorskip("onnx")
    import onnxruntime as ort
    from onnx import helper
    from singa_builtins.layers.slice import SliceLayer

    from singa_core.inference.onnx_export import OPSET, OnnxGraph
    from singa_core.layer import kDeploy, kForward
    from singa_core.testing import SourceLayer, layer_conf, make_ctx

    x = rng.standard_normal((3, 12)).astype(np.float32)
    ctx = make_ctx()
    ctx.phase = kDeploy
    layer = SliceLayer(layer_conf('name: "sl" slice_conf { slice_dim: 1 num_slices: 3 }'), ctx)
    src = SourceLayer(x)
    layer.setup([src])
    layer.forward(kDeploy | kForward, [src])
    g = OnnxGraph()
    parts = layer.to_onnx(g, ["x"])
    assert len(parts) == 3
    outs = [helper.make_tensor_value_info(p, onnx.TensorProto.FLOAT, None) for p in parts]
    graph = helper.make_graph(
        g.nodes,
        "slice",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 12])],
        outs,
        initializer=g.initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = min(model.ir_version, 10)
    got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for k, part in enumerate(got.run(parts, {"x": x})):
        assert np.array_equal(part, layer.datas[k])
