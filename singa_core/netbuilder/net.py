"""NeuralNet: from NetProto to set-up layers and Params (SINGA 0.3 §4).

Construction, for one phase (kTrain, kVal or kTest):

1. phase filter (``include`` / ``exclude``);
2. graph transforms (each a function ``NetProto -> NetProto``; unrolling and partitioning
   plug in here, see :data:`GRAPH_TRANSFORMS`);
3. ``share_from`` resolution (``"w1"`` and SINGA's runtime ``"0#w1"`` both accepted);
4. split layers inserted where one layer feeds several consumers;
5. topological sort (a cycle is an error naming its layers);
6. layers created through the layer registry and set up in order (shape inference);
7. Params created and initialised (or shared).

Every error is raised as a SingaError located in the user's job.conf.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import numpy as np

from singa_core.contracts.device import Device, default_device
from singa_core.contracts.errors import Location, SingaError, did_you_mean
from singa_core.contracts.layer import Layer, LayerContext, kDeploy, kTest, kTrain, kVal
from singa_core.contracts.memory import charge as charge_memory
from singa_core.contracts.names import plain_param_name, split_replica_name, split_unrolled_name
from singa_core.contracts.param import Param, fill_param
from singa_core.netbuilder.fusion import fuse_biases
from singa_core.netbuilder.partition import partition
from singa_core.netbuilder.sequences import plan_units, sequence_slots, transfer_slot
from singa_core.netbuilder.specs import LayerSpec, layer_type_name, spec_location
from singa_core.netbuilder.transfer import device_copy, needs_transfer
from singa_core.netbuilder.unrolling import unroll
from singa_core.plugin_host.registry import type_selection
from singa_core.schema import job_pb2

PHASE_NAMES = {kTrain: "kTrain", kVal: "kVal", kTest: "kTest", kDeploy: "kDeploy"}


def stable_seed(*parts) -> list[int]:
    """A seed sequence derived from ``parts`` that does not depend on PYTHONHASHSEED."""
    h = hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).digest()
    return [int.from_bytes(h[i : i + 4], "little") for i in range(0, 16, 4)]


# Graph transforms run after the phase filter and the source check, in order:
# ``(specs, phase, job, get_plugin, locate, num_partitions=n) -> specs``. Unrolling (§4
# step 3), then partitioning across the workers of a group (§4 steps 6-7).
GRAPH_TRANSFORMS: list[Callable] = [unroll, partition]


def _check_time_steps(net) -> None:
    """A source of time steps (a layer with ``unroll_len`` > 1 and ``output_for``, such as
    kCharRNN: ``char_rnn_conf.unroll_len``) read by fewer unrolled copies than the steps it
    provides skipped the rest of every window without a word (``neuralnet.unroll_len`` 3
    with the data's 5 trained on 3 characters of each 5): refused, at the data's field. (More
    copies than steps is refused by the source itself, when a copy asks for its step.)"""
    for layer in net.layers:
        steps = getattr(layer, "unroll_len", None)
        if not isinstance(steps, int) or steps <= 1 or not hasattr(layer, "output_for"):
            continue
        copies = [
            int(reader.conf.unroll_index) + 1
            for reader in net.layers
            if layer.name in net.specs[reader.name].srcs
        ]
        if copies and max(copies) < steps:
            raise layer.error(
                f"layer '{layer.name}' provides {steps} time steps a window, but the layers "
                f"reading it are unrolled over {max(copies)} (neuralnet.unroll_len or their "
                f"own unroll_len): the other {steps - max(copies)} steps of every window "
                "would never be trained on",
                field=_steps_field(layer),
                help=f"give the data and the net the same unroll_len ({max(copies)} or {steps})",
            )


def _steps_field(layer) -> str | None:
    """The config field that sets a time-step source's steps (``char_rnn_conf.unroll_len``),
    when the layer's conf has one."""
    conf = getattr(layer, "conf", None)
    for field, _value in conf.ListFields() if conf is not None else ():
        if field.message_type is not None and any(
            f.name == "unroll_len" for f in field.message_type.fields
        ):
            return f"{field.name}.unroll_len"
    return None


class NeuralNet:
    """Layers in topological order, their source lists, and all Params."""

    def __init__(self, phase: int) -> None:
        self.phase = phase
        self.num_partitions = 1
        self.layers: list[Layer] = []
        self.by_name: dict[str, Layer] = {}
        self._srcs: dict[str, list[Layer]] = {}
        self.specs: dict[str, LayerSpec] = {}
        self.params: list[Param] = []
        self.notes: dict[str, str] = {}  # one line per layer type without a device path

    def srclayers(self, layer: Layer) -> list[Layer]:
        return self._srcs[layer.name]

    def units(self) -> list:
        """What a worker of an unrolled net executes, in order: single layers and runs of
        all copies of a layer at once (:mod:`singa_core.netbuilder.sequences`); a net
        without runs gives its layers. Decided once per net."""
        units = self.__dict__.get("_units")
        if units is None:
            units = self._units = plan_units(self)
        return units

    @property
    def owner_params(self) -> list[Param]:
        return [p for p in self.params if p.is_owner]

    def param_by_name(self, name: str) -> Param | None:
        for p in self.params:
            if p.name == name:
                return p
        return None

    # -- construction -------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        job,
        phase: int,
        *,
        get_plugin: Callable,
        locate: Callable[[str | None], Location] | None = None,
        seed: int = 0,
        init_params: bool = True,
        num_partitions: int = 1,
        batchsize: int = 0,
        sample_shape: tuple[int, ...] | None = None,
        param_values=None,
        devices=None,
    ) -> NeuralNet:
        """The net of ``phase`` in ``job``. A deploy net (``phase=kDeploy``, built from
        :func:`singa_core.netbuilder.deploy.deploy_job`) also takes the ``batchsize`` its
        input layers set up for, the raw ``sample_shape`` where their confs do not give it,
        and the ``param_values`` its Params use (no copies, no gradients).

        ``devices``: where the layers compute, one :class:`~singa_core.contracts.device.
        Device` per partition (partition j's layers on ``devices[j]``) or a single one for
        all; default: the device in effect (the CPU)."""
        locate = locate or (lambda path=None: None)
        net = cls(phase)
        net.num_partitions = max(int(num_partitions), 1)
        specs = _phase_filter(job.neuralnet, phase, locate)
        _check_sources(specs, phase, locate)
        for transform in GRAPH_TRANSFORMS:
            specs = transform(specs, phase, job, get_plugin, locate, num_partitions=num_partitions)
        _resolve_share_from(specs, locate)
        specs = _insert_split_layers(specs, get_plugin)
        ordered = _topological_order(specs, get_plugin, locate)
        slots = sequence_slots(ordered)

        for spec in ordered:
            conf = spec.conf
            type_name = layer_type_name(conf)
            if type_name == "kUserLayer":
                raise SingaError(
                    f"layer '{conf.name}' has no type",
                    where=spec_location(locate, spec),
                    help='add e.g. `type: kInnerProduct`, or `user_type: "..."` for a type '
                    "from a plugin (see `singa list-plugins`)",
                )
            where_type = spec_location(
                locate, spec, "user_type" if conf.HasField("user_type") else "type"
            )
            try:
                layer_cls = get_plugin("layer", type_name)
            except SingaError as err:
                raise err.located(where_type) from None

            def layer_locate(fieldname=None, _spec=spec):
                return spec_location(locate, _spec, fieldname)

            ctx = LayerContext(
                rng=np.random.default_rng(stable_seed(seed, "layer", conf.name, phase)),
                locate=layer_locate,
                get_plugin=get_plugin,
                phase=phase,
                partition_id=int(conf.partition_id),
                num_partitions=int(conf.num_partitions),
                batchsize=int(batchsize),
                sample_shape=sample_shape,
                param_values=param_values,
                device=_device_of_partition(devices, int(conf.partition_id)),
                sequence=slots.get(conf.name),
            )
            layer = layer_cls(conf, ctx)
            # a source later in the order (only for order_after_first_src_only layers, e.g.
            # the visible RBM layer's hidden layer) is None at setup and filled in below
            for k, part in spec.src_parts.items():  # e.g. a kSlice's part j for partition j
                reserve = getattr(net.by_name.get(spec.srcs[k]), "reserve_part", None)
                if reserve is not None:
                    reserve(layer, part)
            srcs = [
                net.by_name[s].output_for(layer) if s in net.by_name else None for s in spec.srcs
            ]
            for i, src in enumerate(srcs):  # an edge between devices: a copy on it
                if src is not None and needs_transfer(src, layer):
                    srcs[i] = net._add_transfer(src, layer)
            if layer.placement is None and not layer._requested_device.is_host:
                net.notes[type_name] = (
                    f"note: layer type {type_name} does not say it computes on a device "
                    f"(Layer.placement): it runs on the CPU, its data copied to and from "
                    f"{layer._requested_device} every step"
                )
            try:
                layer.setup(srcs)
            except SingaError as err:
                raise err.located(layer_locate()) from None
            except MemoryError as exc:  # a scratch array the estimate does not cover
                raise SingaError(
                    f"not enough memory to set up layer '{conf.name}' ({type_name}): {exc}",
                    where=layer_locate(),
                    help="reduce the batchsize or the layer's size (num_output, shape ...)",
                ) from None
            except (ValueError, IndexError, TypeError) as exc:
                shapes = ", ".join(f"{s.name} {s.shape}" for s in srcs if s) or "no sources"
                raise SingaError(
                    f"layer '{conf.name}' ({type_name}) could not be set up: {exc}",
                    where=layer_locate(),
                    notes=[f"its sources: {shapes}"],
                    help="check the layer's configuration against its sources' shapes",
                ) from None
            net.layers.append(layer)
            net.by_name[layer.name] = layer
            net._srcs[layer.name] = srcs
            net.specs[layer.name] = spec

        for layer in net.layers:  # resolve the forward references
            srcs = net._srcs[layer.name]
            for i, name in enumerate(net.specs[layer.name].srcs):
                if srcs[i] is None:
                    srcs[i] = net.by_name[name].output_for(layer)
        _check_time_steps(net)
        _bind_params(net, locate, get_plugin, seed, init_params)
        fuse_biases(net)  # on a device: a bias added in its consumer's launch (fusion.py)
        return net

    def _add_transfer(self, src, consumer: Layer) -> Layer:
        """A DeviceTransfer from ``src`` to ``consumer``'s device, set up and placed in the
        order (before the consumer, after its sources)."""
        arenas = self.__dict__.setdefault("_transfer_arenas", {})
        transfer = device_copy(src, consumer, sequence=transfer_slot(src, consumer, arenas))
        name = transfer.name
        k = 1
        while name in self.by_name:
            k += 1
            name = f"{transfer.name}#{k}"
        transfer.name = transfer.conf.name = name
        transfer.setup([src])
        self.layers.append(transfer)
        self.by_name[name] = transfer
        self._srcs[name] = [src]
        spec = LayerSpec(transfer.conf, None, [src.name])
        self.specs[name] = spec
        return transfer

    def partition_view(self, partition_id: int) -> NeuralNet:
        """The part of a partitioned net that worker ``partition_id`` of a group runs: its
        layers (in order), their sources and Params. Params keep the ids of the whole net,
        so every process building the same net agrees on ids and slices. For a net that is
        not partitioned, the net itself."""
        if self.num_partitions <= 1:
            return self
        view = NeuralNet(self.phase)
        view.num_partitions = self.num_partitions
        view.partition_id = partition_id
        view.layers = [la for la in self.layers if la.conf.partition_id == partition_id]
        view.by_name = {la.name: la for la in view.layers}
        view._srcs = {la.name: self._srcs[la.name] for la in view.layers}
        view.specs = {la.name: self.specs[la.name] for la in view.layers}
        ids = {p.id for la in view.layers for p in la.params}
        view.params = [p for p in self.params if p.id in ids]
        return view

    def share_params_from(self, other: NeuralNet, locate=lambda path=None: None) -> None:
        """Share values with ``other``'s Params of the same name (test/val nets)."""
        by_name: dict[str, Param] = {}
        for p in other.params:  # an unrolled net's "0#w" is a step-by-step net's "w"
            by_name.setdefault(p.name, p)
            by_name.setdefault(plain_param_name(p.name), p)
        for layer in self.layers:
            for j, p in enumerate(layer.params):
                src = by_name.get(p.name) or by_name.get(plain_param_name(p.name))
                if src is None:
                    continue
                if src.shape != p.shape and other.num_partitions > 1:
                    raise SingaError(
                        f"param '{p.name}' belongs to a layer partitioned on dimension 1 "
                        f"across {other.num_partitions} workers; the "
                        f"{PHASE_NAMES.get(self.phase)} net, built whole as in SINGA 0.3, "
                        f"cannot use its parts",
                        where=spec_location(locate, self.specs[layer.name], "partition_dim"),
                        help="evaluate model-partitioned nets with test_steps: 0 and "
                        "validate_steps: 0 (as 0.3's hybrid.conf), or partition every layer "
                        "on dimension 0",
                    )
                if src.shape != p.shape:
                    raise SingaError(
                        f"param '{p.name}' has shape {p.shape} in the "
                        f"{PHASE_NAMES.get(self.phase)} net but {src.shape} in the "
                        f"{PHASE_NAMES.get(other.phase)} net",
                        where=spec_location(locate, self.specs[layer.name], f"param[{j}]"),
                        help="layers sharing a param must have the same shapes in all phases "
                        "(check their sources' shapes, e.g. store_conf.shape)",
                    )
                p.share_data_from(src)
                p.version = src.version

    def contributions(self) -> dict[int, int]:
        """Owner param id -> number of gradients a TrainOneBatch sends for it per step:
        one per Param holding its own gradient (``share_from`` shares values only; the
        unrolled copies of a Param share its gradient and contribute through copy 0)."""
        counts: dict[int, int] = {}
        for p in self.params:
            if p.grad_owner is p:
                counts[p.owner.id] = counts.get(p.owner.id, 0) + 1
        return counts

    def num_param_values(self) -> int:
        return sum(p.size for p in self.owner_params)

    def summary(self) -> list[tuple[str, str, list[str], tuple, int]]:
        """(name, type, srcs, output shape, #param values owned) per layer."""
        rows = []
        for layer in self.layers:
            spec = self.specs[layer.name]
            owned = sum(p.size for p in layer.params if p.is_owner)
            rows.append(
                (layer.name, layer_type_name(spec.conf), list(spec.srcs), layer.shape, owned)
            )
        return rows


# -- construction steps --------------------------------------------------------------------
def _phase_filter(netconf, phase: int, locate) -> list[LayerSpec]:
    specs, seen = [], {}
    for i, conf in enumerate(netconf.layer):
        if not conf.name:
            raise SingaError(
                "a layer has no name",
                where=locate(f"neuralnet.layer[{i}]"),
                help='give every layer a unique `name: "..."`',
            )
        if conf.include and conf.exclude:
            raise SingaError(
                f"layer '{conf.name}' uses both include and exclude",
                where=locate(f"neuralnet.layer[{i}].exclude"),
                help="use only `include` (exclude is deprecated since SINGA 0.2)",
            )
        if conf.include and phase not in conf.include:
            continue
        if phase in conf.exclude:
            continue
        if conf.name in seen:
            raise SingaError(
                f"duplicate layer name '{conf.name}' in the {PHASE_NAMES.get(phase)} net",
                where=locate(f"neuralnet.layer[{i}].name"),
                notes=[f"first defined at {locate(f'neuralnet.layer[{seen[conf.name]}].name')}"],
                help="layer names must be unique within a phase's net (layers for different "
                "phases may share a name when their include/exclude phases differ)",
            )
        seen[conf.name] = i
        c = job_pb2.LayerProto()
        c.CopyFrom(conf)
        if not c.HasField("partition_dim"):
            c.partition_dim = netconf.partition_dim
        if not c.HasField("unroll_len"):
            c.unroll_len = netconf.unroll_len
        specs.append(LayerSpec(c, i, list(conf.srclayers)))
    if not specs:
        raise SingaError(
            f"the {PHASE_NAMES.get(phase, phase)} net has no layers",
            where=locate("neuralnet"),
            help="check the layers' include/exclude phases",
        )
    return specs


def _check_sources(specs: list[LayerSpec], phase: int, locate) -> None:
    names = {s.conf.name for s in specs}
    for spec in specs:
        for k, src in enumerate(spec.srcs):
            if src in names:
                continue
            where = spec_location(locate, spec, f"srclayers[{k}]")
            hint = did_you_mean(src, names)
            raise SingaError(
                f"layer '{spec.conf.name}' has unknown source layer '{src}'"
                + ("" if phase == kTrain else f" in the {PHASE_NAMES.get(phase)} net"),
                where=where,
                help=hint or f"known layers in this net: {', '.join(sorted(names))}",
            )


def _resolve_share_from(specs: list[LayerSpec], locate) -> None:
    """Check share_from targets exist (both "w1" and "0#w1" spellings)."""
    by_name = {}
    for spec in specs:
        for p in spec.conf.param:
            if p.name:
                by_name[p.name] = p
    for spec in specs:
        for j, p in enumerate(spec.conf.param):
            if not p.share_from:
                continue
            target = _share_target(p.share_from, by_name)
            if target is None:
                raise SingaError(
                    f"param '{p.name or '#' + str(j)}' of layer '{spec.conf.name}' shares from "
                    f"unknown param '{p.share_from}'",
                    where=spec_location(locate, spec, f"param[{j}].share_from"),
                    help=did_you_mean(plain_param_name(p.share_from), by_name)
                    or "share_from names another param's name",
                )
            p.share_from = target


def _share_target(name: str, by_name) -> str | None:
    """The param a share_from names: as written, or in the other spelling ("w1" is
    "0#w1" in an unrolled net, and "0#w1" is "w1" in one that is not)."""
    plain = plain_param_name(name)
    for candidate in (name, plain, f"0#{plain}"):
        if candidate in by_name:
            return candidate
    return None


def _insert_split_layers(specs: list[LayerSpec], get_plugin) -> list[LayerSpec]:
    """Insert kSplit after a layer feeding several consumers (unless it is one-to-many)."""
    consumers: dict[str, list[LayerSpec]] = {}
    for spec in specs:
        for s in spec.srcs:
            consumers.setdefault(s, []).append(spec)
    out = []
    for spec in specs:
        out.append(spec)
        dsts = consumers.get(spec.conf.name, [])
        if len(dsts) <= 1:
            continue
        try:
            cls = get_plugin("layer", layer_type_name(spec.conf))
        except SingaError:
            continue  # reported when the layer itself is created
        if cls.one_to_many:
            continue
        split = job_pb2.LayerProto(name=f"split({spec.conf.name})", type=job_pb2.kSplit)
        split.split_conf.num_splits = len(dsts)
        split.partition_dim = spec.conf.partition_dim
        split.partition_id = spec.conf.partition_id
        split.num_partitions = spec.conf.num_partitions
        out.append(LayerSpec(split, None, [spec.conf.name]))
        for d in dsts:
            d.srcs = [split.name if s == spec.conf.name else s for s in d.srcs]
    return out


def _topological_order(specs: list[LayerSpec], get_plugin, locate) -> list[LayerSpec]:
    """Kahn's algorithm, stable in configuration order.

    A layer class may set ``order_after_first_src_only = True`` (SINGA's bidirectional RBM
    edges): then only its first source must come before it, and the sources that come
    later are ``None`` in its ``setup`` (the net fills them in before any forward).
    """
    index = {s.conf.name: i for i, s in enumerate(specs)}
    deps: dict[str, set[str]] = {}
    for s in specs:
        srcs = s.srcs
        try:
            cls = get_plugin("layer", layer_type_name(s.conf))
            if getattr(cls, "order_after_first_src_only", False):
                srcs = srcs[:1]
        except SingaError:
            pass
        deps[s.conf.name] = set(srcs)
    done: set[str] = set()
    order: list[LayerSpec] = []
    remaining = list(specs)
    while remaining:
        ready = [s for s in remaining if deps[s.conf.name] <= done]
        if not ready:
            cycle = _find_cycle(deps, {s.conf.name for s in remaining})
            first = specs[index[cycle[0]]]
            raise SingaError(
                "the net has a cycle: " + " -> ".join(cycle + [cycle[0]]),
                where=spec_location(locate, first, "srclayers"),
                help="a layer cannot (indirectly) be its own source; check srclayers",
            )
        for s in ready:
            order.append(s)
            done.add(s.conf.name)
        remaining = [s for s in remaining if s.conf.name not in done]
    return order


def _find_cycle(deps: dict[str, set[str]], nodes: set[str]) -> list[str]:
    start = sorted(nodes)[0]
    path, seen = [start], {start: 0}
    cur = start
    while True:
        nxt = sorted(d for d in deps[cur] if d in nodes)[0]
        if nxt in seen:
            return path[seen[nxt] :][::-1]
        seen[nxt] = len(path)
        path.append(nxt)
        cur = nxt


def _bind_params(net: NeuralNet, locate, get_plugin, seed: int, init: bool) -> None:
    """Give Params ids, resolve share_from, initialise owners."""
    by_name: dict[str, Param] = {}
    where_of: dict[int, Location | None] = {}
    for layer in net.layers:
        spec = net.specs[layer.name]
        for j, p in enumerate(layer.params):
            if p.name in by_name:
                raise SingaError(
                    f"param name '{p.name}' is used by two layers",
                    where=spec_location(locate, spec, f"param[{j}].name"),
                    help='to share values use `share_from: "<name>"` with a new name',
                )
            p.id = len(net.params)
            net.params.append(p)
            by_name[p.name] = p
            where_of[p.id] = spec_location(locate, spec, f"param[{j}]")
    for p in net.params:
        if p.proto.share_from:
            src = by_name.get(p.proto.share_from)
            if src is None:  # the target's layer is not in this phase's net
                raise SingaError(
                    f"param '{p.name}' shares from '{p.proto.share_from}', which is not in "
                    f"the {PHASE_NAMES.get(net.phase)} net",
                    where=where_of[p.id],
                    help="the layer owning the shared param must be in every phase that uses it",
                )
            if src.shape != p.shape:
                raise SingaError(
                    f"param '{p.name}' {p.shape} cannot share from '{src.name}' {src.shape}",
                    where=where_of[p.id],
                    help="shared params must have the same shape (use transpose: true on "
                    "kInnerProduct to share a transposed weight)",
                )
            p.share_data_from(src)
    for layer in net.layers:  # replicas on the batch dimension: values of replica 0 (9c)
        if layer.conf.num_partitions <= 1 or layer.conf.partition_dim != 0:
            continue
        for p in layer.params:
            index, base = split_replica_name(p.name)
            first = by_name.get(base) if index else None
            if first is not None and first.shape == p.shape:
                p.share_data_from(first)
                p.replica = True
    for p in net.params:  # unrolled copies: value and gradient of copy 0 (§4 step 9b)
        index, rest = split_unrolled_name(p.name)
        if index:
            first = by_name.get(f"0#{rest}")
            if first is not None and first.shape == p.shape:
                p.share_data_from(first)
                p.share_grad_from(first)
    if net.phase == kTrain:  # the servers' updater history of every trained Param
        for layer in net.layers:
            for p in layer.params:
                if p.is_owner and p.learnable and p.grad_owner is p:
                    charge_memory(layer, "updater", p.shape, what=f"updater state of '{p.name}'")
    if init:
        for p in net.params:
            if p.is_owner:
                init_param(p, get_plugin, seed, where_of[p.id])


def _device_of_partition(devices, partition_id: int):
    if devices is None:
        return default_device()
    if isinstance(devices, Device):
        return devices
    return devices[partition_id] if partition_id < len(devices) else devices[-1]


def param_generator_name(gen_conf) -> str:
    return type_selection(gen_conf, "type", "user_type")


def init_param(p: Param, get_plugin, seed: int, where=None, version: int = 0) -> None:
    gen_conf = p.proto.init
    name = param_generator_name(gen_conf)
    if name == "kUserInit" and not gen_conf.HasField("user_type"):
        raise SingaError(
            f"param '{p.name}' has no init method",
            where=where,
            help="add e.g. `init { type: kUniform low: -0.05 high: 0.05 }` to the param",
        )
    try:
        gen = get_plugin("param_generator", name)(gen_conf)
        fill_param(gen, p, np.random.default_rng(stable_seed(seed, "param", p.name)))
    except SingaError as err:
        raise err.located(where) from None
    except MemoryError as exc:
        raise SingaError(
            f"not enough memory to initialise param '{p.name}' {p.shape}: {exc}",
            where=where,
            help="reduce the layer's size (num_output, shape ...)",
        ) from None
    p.version = version
