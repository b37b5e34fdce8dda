"""``singa export --format onnx``: the deploy net as one ONNX graph.

The graph takes ``input``, float32 ``(N, *sample_shape)`` raw samples exactly as
``Model.predict`` takes them (the data layer's preprocessing is in the graph), and gives
``output``, float32 ``(N, K)``: what ``predict`` returns (class probabilities for a softmax
loss). ``N`` is dynamic; opset 17; the model passes ``onnx.checker``.

A recurrent layer that carries its state between calls (a GRU in a sampling net) adds a
graph input ``<layer>/state`` (zeros when not fed) and a graph output ``<layer>/state_out``:
feed one call's ``state_out`` as the next call's ``state`` to go on as ``predict`` does.

Each layer adds its own part through :meth:`Layer.to_onnx(g, inputs)` (the optional export
method of the Layer contract): ``g`` is an :class:`OnnxGraph`, ``inputs`` the names of its
sources' output tensors (batch first, the shapes the layer sees in singa); it returns the
name of its output tensor. A layer without ``to_onnx`` is an error naming it and its type.
Params become initializers under their job.conf names.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from singa_core.contracts.errors import SingaError

OPSET = 17


def _onnx():
    try:
        import onnx
        from onnx import helper, numpy_helper
    except ImportError:
        raise SingaError(
            "exporting to ONNX needs the onnx package",
            where="--format",
            help="pip install 'singa-classic[onnx]'",
        ) from None
    return onnx, helper, numpy_helper


class OnnxGraph:
    """What a layer's ``to_onnx`` builds with: nodes, initializers and tensor shapes.

    ``shape(name)``: a tensor's shape without the batch dimension, as singa has it."""

    def __init__(self) -> None:
        _, self._helper, self._numpy_helper = _onnx()
        self.nodes: list = []
        self.initializers: list = []
        self._names: set[str] = set()
        self._shapes: dict[str, tuple[int, ...]] = {}
        # recurrent state: (graph input, shape) with zeros as its default, (graph output, shape)
        self.state_inputs: list[tuple[str, tuple[int, ...]]] = []
        self.state_outputs: list[tuple[str, tuple[int, ...]]] = []

    def fresh(self, hint: str) -> str:
        base = "".join(c if c.isalnum() or c in "_./#@" else "_" for c in hint) or "t"
        name, k = base, 1
        while name in self._names:
            k += 1
            name = f"{base}_{k}"
        self._names.add(name)
        return name

    def add(
        self, op: str, inputs: list[str], *, name: str = "", outputs: int = 1, **attrs
    ) -> str | list[str]:
        """Add node ``op``; returns its output name (a list when ``outputs`` > 1)."""
        outs = [
            self.fresh(f"{name or op}" + (f":{i}" if outputs > 1 else "")) for i in range(outputs)
        ]
        self.nodes.append(
            self._helper.make_node(
                op, list(inputs), outs, name=self.fresh(f"node/{name or op}"), **attrs
            )
        )
        return outs if outputs > 1 else outs[0]

    def const(self, value, hint: str = "const", dtype=np.float32) -> str:
        """An initializer holding ``value`` (float32 unless ``dtype`` says otherwise)."""
        name = self.fresh(hint)
        array = np.asarray(value, dtype=dtype)
        self.initializers.append(self._numpy_helper.from_array(array, name))
        return name

    def param(self, p, shape=None) -> str:
        """The initializer of Param ``p`` (its trained value; ``shape`` reshapes it)."""
        value = p.value if shape is None else p.value.reshape(shape)
        return self.const(value, p.name)

    def reshape(self, x: str, shape, hint: str = "reshape") -> str:
        """``x`` reshaped to ``(N, *shape)`` (the batch dimension kept)."""
        target = self.const([0, *[int(s) for s in shape]], f"{hint}/shape", np.int64)
        return self.add("Reshape", [x, target], name=hint)

    def state(self, name: str, shape) -> str:
        """A recurrent layer's incoming state: the graph input ``name`` (``(N, *shape)``),
        zeros unless the caller feeds it (an initializer of shape ``(1, *shape)`` is its
        default, broadcast over the batch)."""
        self._names.add(name)
        self.state_inputs.append((name, tuple(int(s) for s in shape)))
        self.initializers.append(
            self._numpy_helper.from_array(np.zeros((1, *shape), dtype=np.float32), name)
        )
        return name

    def state_out(self, name: str, tensor: str, shape) -> None:
        """Make ``tensor`` (a recurrent layer's new state) the graph output ``name``."""
        self._names.add(name)
        self.nodes.append(self._helper.make_node("Identity", [tensor], [name], name=name))
        self.state_outputs.append((name, tuple(int(s) for s in shape)))

    def set_shape(self, name: str, shape) -> None:
        self._shapes[name] = tuple(int(s) for s in shape)

    def shape(self, name: str) -> tuple[int, ...]:
        return self._shapes[name]


def _export_layer(layer, g: OnnxGraph, inputs: list[str]) -> str:
    method = getattr(layer, "to_onnx", None)
    if method is None:
        from singa_core.netbuilder.specs import layer_type_name

        # the name job.conf selects it by (a plugin's user_type, not its Python class)
        type_name = layer_type_name(layer.conf) if layer.conf is not None else ""
        cls = type(layer)
        raise SingaError(
            f"layer '{layer.name}' ({type_name or cls.__name__}) has no ONNX export",
            where=layer.ctx.locate(),
            help=f"predict with `singa predict` instead, or give its class "
            f"({cls.__module__}.{cls.__qualname__}) a to_onnx(g, inputs) method: CONTRIBUTING.md, "
            "'The deploy net and exporting a layer' (`singa new-plugin NAME --kind layer` "
            "writes one with its test)",
        )
    out = method(g, inputs)
    if isinstance(out, str) and layer.data is not None:
        g.set_shape(out, layer.data.shape[1:])
    return out  # a name, or a list of names (one per part, for kSlice)


def build_graph(net, input_layer: str, output_layer: str, sample_shape, *, name="singa"):
    """The ONNX ModelProto of a set-up deploy ``net``."""
    onnx, helper, _ = _onnx()
    g = OnnxGraph()
    g._names.update({"input", "output"})
    g.set_shape("input", sample_shape)
    tensors: dict[str, str] = {}
    for layer in net.layers:
        if layer.name == input_layer:
            inputs = ["input"]
        else:
            inputs = []
            for src in net.srclayers(layer):
                part = getattr(src, "index", None)  # a part of a multi-output layer
                owner = src.layer.name if part is not None else src.name
                out = tensors[owner]
                inputs.append(out[part] if isinstance(out, list) else out)
        tensors[layer.name] = _export_layer(layer, g, inputs)
    last = tensors[output_layer]
    flat = g.add("Flatten", [last], name="output/flatten", axis=1)
    g.nodes.append(helper.make_node("Identity", [flat], ["output"], name="output"))
    out_dim = int(np.prod(net.by_name[output_layer].data.shape[1:]))
    graph = helper.make_graph(
        g.nodes,
        name,
        [
            helper.make_tensor_value_info(
                "input", onnx.TensorProto.FLOAT, ["N", *map(int, sample_shape)]
            )
        ]
        + [
            helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, [None, *s])
            for n, s in g.state_inputs
        ],
        [helper.make_tensor_value_info("output", onnx.TensorProto.FLOAT, ["N", out_dim])]
        + [
            helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, ["N", *s])
            for n, s in g.state_outputs
        ],
        initializer=g.initializers,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="singa-classic"
    )
    model.ir_version = min(model.ir_version, 10)  # what current runtimes read
    onnx.checker.check_model(model)
    return model


def export_onnx(model, out: str | Path) -> str:
    """Write the ONNX graph of ``model`` (:class:`singa_core.inference.model.Model`)."""
    from singa_core.running.fileio import atomic_write_bytes

    net = model.net
    proto = build_graph(
        net,
        model.input_name,
        model.plan.output,
        model.sample_shape,
        name=model.plan.job.name or "singa",
    )
    atomic_write_bytes(out, proto.SerializeToString(), "ONNX model")
    return (
        f"wrote {out}: input 'input' (N, {', '.join(map(str, model.sample_shape))}) -> "
        f"output 'output' (N, {model.num_outputs}); opset {OPSET}; "
        f"{len(proto.graph.node)} nodes"
    )
