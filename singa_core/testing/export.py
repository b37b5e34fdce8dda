"""The plugin author's check of a layer's ONNX export (``Layer.to_onnx``).

:func:`check_onnx_export` builds the layer over sources holding the given arrays (in the
deploy phase: no gradients, ``forward`` as when predicting), runs its ``forward``, builds an
ONNX graph from its ``to_onnx`` alone (one graph input per source, the batch dimension
dynamic, and one per recurrent state it asks for with ``g.state``, fed zeros as ``forward``
starts from), runs that graph in onnxruntime on the same arrays and compares::

    from singa_core.testing import check_onnx_export
    check_onnx_export(SwishLayer, 'name: "s" type: kSwish', [np.random.randn(4, 8)])

Needs the ``onnx`` and ``onnxruntime`` packages (the plugin's test extra).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from singa_core.contracts.layer import Layer, kDeploy, kForward
from singa_core.testing.gradcheck import SourceLayer, init_params, layer_conf, make_ctx


@dataclass
class ExportReport:
    layer: str
    nodes: int  # ONNX nodes the layer's to_onnx added
    max_abs_diff: float


def check_onnx_export(
    cls,
    conf,
    sources: Sequence[np.ndarray],
    *,
    seed: int = 0,
    atol: float = 1e-5,
    rtol: float = 1e-5,
) -> ExportReport:
    """Compare ``cls``'s ``to_onnx`` graph in onnxruntime with its ``forward`` on
    ``sources``; AssertionError on a difference beyond ``atol + rtol·|value|``."""
    import onnx
    import onnxruntime as ort
    from onnx import helper

    from singa_core.inference.onnx_export import OPSET, OnnxGraph

    if isinstance(cls, str):
        from singa_core.testing.layers import resolve

        cls = resolve("layer", cls)
    if isinstance(conf, str):
        conf = layer_conf(conf)
    srcs = [
        SourceLayer(np.asarray(a, dtype=np.float32), name=f"src{i}") for i, a in enumerate(sources)
    ]
    ctx = make_ctx(seed)
    ctx.phase = kDeploy
    layer: Layer = cls(conf, ctx)
    layer.setup(srcs)
    init_params(layer, np.random.default_rng(seed + 1), 0.5)
    layer.forward(kDeploy | kForward, srcs)
    expected = np.array(layer.data, dtype=np.float32)

    assert hasattr(layer, "to_onnx"), f"{cls.__name__} has no to_onnx method"
    g = OnnxGraph()
    names = []
    for i, s in enumerate(srcs):
        name = f"src{i}"
        g._names.add(name)
        g.set_shape(name, s.data.shape[1:])
        names.append(name)
    out = layer.to_onnx(g, names)
    g.nodes.append(helper.make_node("Identity", [out], ["output"], name="output"))
    graph = helper.make_graph(
        g.nodes,
        f"check-{layer.name}",
        [
            helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, ["N", *s.data.shape[1:]])
            for n, s in zip(names, srcs, strict=True)
        ]
        + g.state_input_infos(),  # a recurrent layer's state: zeros, as forward starts
        [
            helper.make_tensor_value_info(
                "output", onnx.TensorProto.FLOAT, ["N", *expected.shape[1:]]
            )
        ],
        initializer=g.initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = min(model.ir_version, 10)
    onnx.checker.check_model(model)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feed = {n: s.data for n, s in zip(names, srcs, strict=True)}
    batch = len(srcs[0].data)
    feed.update({n: np.zeros((batch, *shape), np.float32) for n, shape in g.state_inputs})
    got = session.run(["output"], feed)[0]
    assert got.shape == expected.shape or got.size == expected.size, (
        f"{layer.name}: the export gives shape {got.shape}, forward {expected.shape}"
    )
    got = got.reshape(expected.shape)
    diff = np.abs(got - expected)
    bound = atol + rtol * np.abs(expected)
    worst = int(np.argmax(diff - bound))
    assert (diff <= bound).all(), (
        f"{layer.name}: the ONNX export differs from forward by {diff.flat[worst]:.3g} at "
        f"{np.unravel_index(worst, diff.shape)} (forward {expected.flat[worst]:.6g}, "
        f"onnx {got.flat[worst]:.6g})"
    )
    return ExportReport(layer.name, len(g.nodes) - 1, float(diff.max(initial=0.0)))
