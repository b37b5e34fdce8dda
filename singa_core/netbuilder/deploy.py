"""The deploy net: the net a trained model predicts (and is exported) with.

From any job.conf (SINGA 0.3 has the phase ``kDeploy`` but no rule for it):

* where layers say ``include: kDeploy``, the deploy net is the kDeploy phase's layers (those
  and the layers without include/exclude), as 0.3 meant it;
* otherwise it is derived from the test net (the validation or the training net when the
  job has no complete test net, e.g. no test data).

Either way each layer's class says what becomes of it (``Layer.deploy_role``): ``"keep"``
layers stay; ``"drop"`` layers (labels, accuracy, file writers, record readers feeding
parser layers) go; ``"input"`` layers stay with their own sources dropped and are fed raw
samples, with their own preprocessing (mean/std, scale, mean file); an ``"output"`` layer (a
loss) is replaced by what its class says (a softmax loss by a softmax over its first
source, so predictions are class probabilities), or by its first source (a Euclidean loss).
A layer with no deploy behaviour, a kept layer whose source was dropped, and a net without
exactly one output are located errors naming the layer.

The result is a job whose ``neuralnet`` holds just the deploy layers (no include/exclude),
built with :meth:`NeuralNet.create` at phase ``kDeploy`` and any batch size; ``locate``
maps its layers back to the user's job.conf.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from singa_core.contracts.errors import SingaError
from singa_core.contracts.layer import kDeploy, kTest, kTrain, kVal
from singa_core.netbuilder.net import _phase_filter
from singa_core.netbuilder.specs import layer_type_name, spec_location
from singa_core.schema import job_pb2

_ROLES = ("keep", "drop", "input", "output")


@dataclass
class DeployPlan:
    """A job whose net is the deploy net, and what it is made of."""

    job: job_pb2.JobProto
    inputs: list[str]  # layers fed raw samples, in job.conf order
    output: str  # the layer whose data is the prediction
    locate: Callable = field(repr=False, default=lambda path=None: None)
    from_deploy_phase: bool = False  # the conf's own kDeploy layers, not the test net
    dropped: list[str] = field(default_factory=list)
    replaced: dict[str, str] = field(default_factory=dict)  # loss -> the type standing for it

    def describe(self) -> list[str]:
        """Lines saying how the deploy net was made (for the dry-run)."""
        origin = "the kDeploy layers" if self.from_deploy_phase else "the test net"
        lines = [
            f"deploy net: from {origin}; input {', '.join(self.inputs)}; output '{self.output}'"
        ]
        if self.dropped:
            lines.append(f"  dropped: {', '.join(self.dropped)}")
        for name, typ in self.replaced.items():
            lines.append(f"  loss '{name}' -> {typ}")
        return lines


def has_deploy_phase(job) -> bool:
    return any(kDeploy in layer.include for layer in job.neuralnet.layer)


def deploy_job(job, get_plugin, locate=None) -> DeployPlan:
    """The deploy net of ``job`` (a JobProto), as a job of its own (see the module text)."""
    locate = locate or (lambda path=None: None)
    own = has_deploy_phase(job)
    if own:
        specs = _phase_filter(job.neuralnet, kDeploy, locate)
    else:  # the test net; a job without a complete one (no test data): the training net
        specs = _complete_net(job, locate)

    roles: dict[str, str] = {}
    classes = {}
    for spec in specs:
        conf = spec.conf
        name = layer_type_name(conf)
        try:
            cls = get_plugin("layer", name)
        except SingaError as err:
            raise err.located(spec_location(locate, spec, "type")) from None
        role = getattr(cls, "deploy_role", "keep")
        role = role(conf) if callable(role) else role  # a role that depends on the conf
        if role not in _ROLES:
            raise SingaError(
                f"layer '{conf.name}' ({name}) has no deploy behaviour, so the trained model "
                "cannot predict through it",
                where=spec_location(locate, spec),
                help="give the net layers for prediction with `include: kDeploy`, or (for a "
                "plugin's layer) set its class's deploy_role (CONTRIBUTING.md, 'The deploy "
                "net')",
            )
        roles[conf.name], classes[conf.name] = role, (cls, name)

    dropped = [n for n, r in roles.items() if r == "drop"]
    gone = set(dropped)
    stand_in: dict[str, str] = {}  # a loss replaced by its first source: loss -> source
    out_specs: list[tuple] = []  # (conf, original spec)
    replaced: dict[str, str] = {}
    for spec in specs:
        conf, role = spec.conf, roles[spec.conf.name]
        if role == "drop":
            continue
        new = job_pb2.LayerProto()
        new.CopyFrom(conf)
        new.ClearField("include")
        new.ClearField("exclude")
        if role == "input":
            new.ClearField("srclayers")
        elif role == "output":
            cls, typ = classes[conf.name]
            rep = cls.deploy_output(conf)
            if rep is None:
                if not conf.srclayers:
                    raise SingaError(
                        f"loss layer '{conf.name}' ({typ}) has no source to predict with",
                        where=spec_location(locate, spec, "srclayers"),
                        help="a loss's first source is the prediction; connect one",
                    )
                stand_in[conf.name] = conf.srclayers[0]
                gone.add(conf.name)
                replaced[conf.name] = f"its source '{conf.srclayers[0]}'"
                continue
            new = rep
            replaced[conf.name] = f"{layer_type_name(rep)} over '{', '.join(rep.srclayers)}'"
        out_specs.append((new, spec))

    names = {conf.name for conf, _ in out_specs}
    for conf, spec in out_specs:
        for k, src in enumerate(conf.srclayers):
            src = stand_in.get(src, src)
            conf.srclayers[k] = src
            if src in gone or src not in names:
                why = (
                    f"which the deploy net drops ({classes[src][1]})"
                    if src in classes
                    else "which is not in the net the deploy net comes from"
                )
                raise SingaError(
                    f"layer '{conf.name}' reads '{src}', {why}",
                    where=spec_location(locate, spec, f"srclayers[{k}]"),
                    help="give the net layers for prediction with `include: kDeploy`",
                )
    consumed = {s for conf, _ in out_specs for s in conf.srclayers}
    sinks = [conf.name for conf, _ in out_specs if conf.name not in consumed]
    # the output: a layer the conf puts in kDeploy by name, else the replacement of a loss,
    # or a loss's source, else the one sink
    own_sinks = [n for n in sinks if own and kDeploy in _conf_of(specs, n).include]
    outputs = (
        own_sinks
        or [n for n in sinks if n in replaced]
        or [stand_in[n] for n in replaced if n in stand_in and stand_in[n] in sinks]
    )
    outputs = outputs or sinks
    if len(set(outputs)) == 1:  # keep what the output needs, nothing else
        needed, todo = set(), [outputs[0]]
        by_name = {conf.name: conf for conf, _ in out_specs}
        while todo:
            name = todo.pop()
            if name not in needed:
                needed.add(name)
                todo.extend(by_name[name].srclayers)
        dropped += [c.name for c, _ in out_specs if c.name not in needed]
        out_specs = [(c, s) for c, s in out_specs if c.name in needed]
        replaced = {n: r for n, r in replaced.items() if n in needed or stand_in.get(n) in needed}
    inputs = [conf.name for conf, _ in out_specs if roles.get(conf.name) == "input"]
    if not inputs:
        raise SingaError(
            "the deploy net has no input layer to feed samples to",
            where=locate("neuralnet"),
            help="predicting needs a data layer whose type can read raw samples "
            "(kRecordInput, kCSVInput, kMnist, kRGBImage ...)",
        )
    if len(set(outputs)) != 1:
        raise SingaError(
            f"the deploy net has {len(set(outputs))} outputs "
            f"({', '.join(sorted(set(outputs))) or 'none'}); a prediction needs exactly one",
            where=locate("neuralnet"),
            help="give the net layers for prediction with `include: kDeploy`, ending in one layer",
        )

    deployed = job_pb2.JobProto()
    deployed.CopyFrom(job)
    deployed.neuralnet.ClearField("layer")
    origin: list[int | None] = []
    for conf, spec in out_specs:
        deployed.neuralnet.layer.add().CopyFrom(conf)
        origin.append(spec.conf_index)

    def deploy_locate(path=None):
        prefix = "neuralnet.layer["
        if path and path.startswith(prefix):
            index, _, rest = path[len(prefix) :].partition("]")
            original = origin[int(index)] if index.isdigit() and int(index) < len(origin) else None
            if original is None:
                return locate("neuralnet")
            return locate(f"{prefix}{original}]{rest}")
        return locate(path)

    return DeployPlan(
        job=deployed,
        inputs=inputs,
        output=outputs[0],
        locate=deploy_locate,
        from_deploy_phase=own,
        dropped=dropped,
        replaced=replaced,
    )


def _conf_of(specs, name: str):
    return next(s.conf for s in specs if s.conf.name == name)


def _complete_net(job, locate):
    """The layers of the first of the test, validation and training nets whose every source
    is in it (a job without test data has no usable test net)."""
    for phase in (kTest, kVal, kTrain):
        try:
            specs = _phase_filter(job.neuralnet, phase, locate)
        except SingaError:
            continue
        names = {s.conf.name for s in specs}
        if all(src in names for s in specs for src in s.conf.srclayers):
            return specs
    return _phase_filter(job.neuralnet, kTest, locate)  # its error says what is missing
