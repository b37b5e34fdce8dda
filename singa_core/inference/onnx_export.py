"""``singa export --format onnx``: the deploy net as one ONNX graph.

The graph takes ``input``, float32 ``(N, *sample_shape)`` raw samples exactly as
``Model.predict`` takes them (the data layer's preprocessing is in the graph), and gives
``output``, float32 ``(N, K)``: what ``predict`` returns (class probabilities for a softmax
loss). ``N`` is dynamic; opset 17; the model passes ``onnx.checker``.

A recurrent layer that carries its state between calls (a GRU in a sampling net) adds a
graph input ``<layer>/state`` and a graph output ``<layer>/state_out``, both float32
``(N, hidden)``: feed one call's ``state_out`` as the next call's ``state`` to go on as
``predict`` does. The state is a real graph input, never also an initializer (onnxruntime
warns about such an input, and onnx2torch freezes it into a constant). Its form
(``state_form``, ``singa export --onnx-state``):

* ``required`` (the default): a plain tensor input the caller always feeds; zeros
  ``(N, hidden)`` start a sequence. onnx.checker, onnxruntime, onnx's ReferenceEvaluator
  and onnx2torch (the state is the converted module's second argument) all run it.
* ``optional``: an ``optional(tensor(float))`` input with zeros as its default
  (OptionalHasElement, then an If that gives the fed tensor or zeros): onnxruntime runs it
  with the state left out of the feed, ReferenceEvaluator with ``None`` fed for it;
  onnx2torch 1.5 has no converter for the Optional operators.

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
# how a recurrent layer's incoming state is a graph input (see the module docstring)
STATE_FORMS = ("required", "optional")


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

    ``shape(name)``: a tensor's shape without the batch dimension, as singa has it;
    ``state_form``: one of :data:`STATE_FORMS`, how :meth:`state` makes a graph input."""

    def __init__(self, state_form: str = "required") -> None:
        if state_form not in STATE_FORMS:
            raise ValueError(f"state_form {state_form!r}: one of {', '.join(STATE_FORMS)}")
        self.state_form = state_form
        self._onnx, self._helper, self._numpy_helper = _onnx()
        self.nodes: list = []
        self.initializers: list = []
        self._names: set[str] = set()
        self._shapes: dict[str, tuple[int, ...]] = {}
        # recurrent state: (graph input, shape), (graph output, shape); shapes without N
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

    def state(self, name: str, shape, batch_of: str = "input") -> str:
        """A recurrent layer's incoming state, the graph input ``name`` (``(N, *shape)``);
        returns the tensor the layer reads it from. ``required`` form: the input itself,
        which the caller always feeds (zeros to start). ``optional`` form: the input, or
        zeros ``(N, *shape)`` when the caller gives none (``N``: the batch of the tensor
        ``batch_of``). Never an initializer of that name."""
        shape = tuple(int(s) for s in shape)
        self._names.add(name)
        self.state_inputs.append((name, shape))
        if self.state_form == "required":
            return name
        helper, float32 = self._helper, self._onnx.TensorProto.FLOAT
        batch = self.add("Shape", [batch_of], name=f"{name}/batch", start=0, end=1)
        dims = self.const(list(shape), f"{name}/dims", np.int64)
        full = self.add("Concat", [batch, dims], name=f"{name}/shape", axis=0)
        given = self.add("OptionalHasElement", [name], name=f"{name}/given")

        def branch(op: str, src: str, hint: str, **attrs):
            out = self.fresh(f"{name}/{hint}")
            node = helper.make_node(
                op, [src], [out], name=self.fresh(f"node/{name}/{hint}"), **attrs
            )
            result = helper.make_tensor_value_info(out, float32, [None, *shape])
            return helper.make_graph([node], self.fresh(f"{name}/{hint}/graph"), [], [result])

        zero = self._numpy_helper.from_array(np.zeros(1, dtype=np.float32))
        return self.add(
            "If",
            [given],
            name=f"{name}/or_zeros",
            then_branch=branch("OptionalGetElement", name, "fed"),
            else_branch=branch("ConstantOfShape", full, "zeros", value=zero),
        )

    def state_input_infos(self) -> list:
        """The graph inputs of the recurrent states, ``(N, *shape)`` in ``state_form``."""
        helper, float32 = self._helper, self._onnx.TensorProto.FLOAT
        infos = []
        for name, shape in self.state_inputs:
            tensor = helper.make_tensor_type_proto(float32, ["N", *shape])
            if self.state_form == "optional":
                tensor = helper.make_optional_type_proto(tensor)
            infos.append(helper.make_value_info(name, tensor))
        return infos

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


def build_graph(
    net,
    input_layer: str,
    output_layer: str,
    sample_shape,
    *,
    name="singa",
    state_form: str = "required",
):
    """The ONNX ModelProto of a set-up deploy ``net`` (``state_form``: one of
    :data:`STATE_FORMS`, the form of a recurrent layer's state input)."""
    onnx, helper, _ = _onnx()
    g = OnnxGraph(state_form)
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
        + g.state_input_infos(),
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


def export_onnx(model, out: str | Path, state_form: str = "required") -> str:
    """Write the ONNX graph of ``model`` (:class:`singa_core.inference.model.Model`);
    ``state_form``: how a recurrent layer's state is a graph input (:data:`STATE_FORMS`)."""
    from singa_core.running.fileio import atomic_write_bytes

    net = model.net
    proto = build_graph(
        net,
        model.input_name,
        model.plan.output,
        model.sample_shape,
        name=model.plan.job.name or "singa",
        state_form=state_form,
    )
    atomic_write_bytes(out, proto.SerializeToString(), "ONNX model")
    states = "".join(
        f"; state '{i.name}' (N, {', '.join(map(str, shape))}) -> '{o.name}'"
        for i, o, shape in _states(proto)
    )
    if states:
        states += (
            " (feed zeros to start)"
            if state_form == "required"
            else " (optional: zeros when not fed)"
        )
    return (
        f"wrote {out}: input 'input' (N, {', '.join(map(str, model.sample_shape))}) -> "
        f"output 'output' (N, {model.num_outputs}){states}; opset {OPSET}; "
        f"{len(proto.graph.node)} nodes"
    )


def _states(proto):
    """(state input, state output, shape without N) of each recurrent state in ``proto``:
    the graph inputs after ``input`` and outputs after ``output``, in the same order."""
    for i, o in zip(proto.graph.input[1:], proto.graph.output[1:], strict=True):
        yield i, o, [d.dim_value for d in o.type.tensor_type.shape.dim[1:]]
