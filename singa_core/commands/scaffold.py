"""``singa new-plugin NAME --kind KIND``: write a ready plugin package.

The package (``DIR/singa-NAME/``) holds a ``pyproject.toml`` with the ``singa`` entry point
and the dependency on the core distribution, the plugin module (a working type of that kind,
declaring the plugin API range it was built for), a ``.proto`` extension of the message the
kind is configured by and its generated ``_pb2`` module, a README, an example job.conf on
MNIST and a test suite using the kit (:mod:`singa_core.testing`). The files come from
``singa_core/commands/scaffold_templates/<kind>/`` (package data), filled in with
:class:`string.Template` (``$name`` placeholders).

No protoc. The configuration message's fields are declared here (:data:`CONF_FIELDS`);
both the ``.proto`` text (its ``$fields``) and a ``FileDescriptorProto`` are made from
them, and :func:`singa_core.schema.python_module_source` turns the descriptor into the
``_pb2`` module protoc would write, so a package made on a plain install (protobuf only)
imports and passes its tests at once. The ``.proto`` stays the source of truth for its
author: after editing it, ``singa compile-proto`` (the ``[proto]`` extra) regenerates the
module (tests/test_plugin_scaffold.py checks that protoc describes the same file).

Extension field numbers. Each extendable message reserves a range (``extensions 101 to 200``
on JobProto, AlgProto, ParamProto, ParamGenProto, UpdaterProto, LRGenProto; ``1001 to 1100``
on LayerProto). Two plugins extending one message with one number cannot be loaded
together, and independent authors do not coordinate, so the scaffold does not hand out
the first number of the range (what everybody would pick): it takes the slot
``sha256("<python package>/<message>") mod 100`` of the range. Names differ between
packages, so numbers spread evenly over the 100 slots: two given plugins collide with
probability 1/100, and a clash, should it happen, is reported at load naming both packages
(change the number with ``--field-number`` or by editing the .proto and recompiling).
"""

from __future__ import annotations

import hashlib
import re
import shlex
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from string import Template

from google.protobuf import descriptor_pb2

from singa_core.contracts.errors import SingaError
from singa_core.contracts.version import CORE_DISTRIBUTION, PLUGIN_API_VERSION

#: message -> (first, last) extension number reserved for plugins (proto/job.proto)
EXTENSION_RANGES = {
    "singa.JobProto": (101, 200),
    "singa.AlgProto": (101, 200),
    "singa.ParamProto": (101, 200),
    "singa.ParamGenProto": (101, 200),
    "singa.UpdaterProto": (101, 200),
    "singa.LRGenProto": (101, 200),
    "singa.LayerProto": (1001, 1100),
}


@dataclass(frozen=True)
class Kind:
    hook: str  # the hookspec the plugin implements
    extends: str | None  # the message its .proto extends (None: no conf message)
    summary: str


KINDS = {
    "layer": Kind("singa_register_layers", "singa.LayerProto", "a layer with a learnable Param"),
    "worker": Kind("singa_register_workers", "singa.AlgProto", "a TrainOneBatch algorithm"),
    "updater": Kind("singa_register_updaters", "singa.UpdaterProto", "an updater"),
    "lr": Kind("singa_register_lr_changes", "singa.LRGenProto", "a learning-rate schedule"),
    "paramgen": Kind(
        "singa_register_param_generators", "singa.ParamGenProto", "a Param initialiser"
    ),
    "engine": Kind("singa_register_engines", None, "an engine"),
    "store": Kind("singa_register_stores", None, "a record store"),
    "dataset": Kind("singa_register_datasets", None, "a dataset converter"),
}


@dataclass(frozen=True)
class ConfField:
    """An optional scalar field of a kind's configuration message (numbered in order)."""

    type: str  # a proto scalar type: bool, float, int32
    name: str
    default: str | None  # as written in the .proto; None: no default
    comment: str = ""


#: the fields of each kind's configuration message ``<Camel>Proto``
CONF_FIELDS = {
    "layer": (
        ConfField(
            "bool",
            "shared",
            "false",
            "one slope for the whole input instead of one per feature (axis 1)",
        ),
        ConfField(
            "float",
            "init_slope",
            "0.25",
            "the slope's initial value when the layer's param entry gives no init",
        ),
    ),
    "worker": (
        ConfField(
            "int32",
            "accumulate",
            "2",
            "mini-batches whose gradients are added up before one update is sent",
        ),
    ),
    "updater": (
        ConfField(
            "float",
            "beta1",
            "0.9",
            "interpolation of momentum and gradient for the update direction",
        ),
        ConfField("float", "beta2", "0.99", "decay of the momentum"),
    ),
    "lr": (
        ConfField("int32", "warmup_steps", "0", "steps of linear warm-up from 0 to base_lr"),
        ConfField(
            "int32",
            "decay_steps",
            None,
            "steps of the cosine decay from base_lr to final_lr that follows",
        ),
        ConfField("float", "final_lr", "0"),
    ),
    "paramgen": (ConfField("float", "gain", "1", "the singular values of the initial matrix"),),
}

_FDP = descriptor_pb2.FieldDescriptorProto
_SCALAR_TYPES = {"bool": _FDP.TYPE_BOOL, "float": _FDP.TYPE_FLOAT, "int32": _FDP.TYPE_INT32}
#: the schema file every extension imports (its descriptor name)
SCHEMA_PROTO = "singa_core/schema/job.proto"


def _default_value(field: ConfField) -> str:
    """The default as protoc stores it in a descriptor (``1`` for a float ``1.0``)."""
    text = field.default or ""
    if field.type == "bool":
        if text not in ("true", "false"):
            raise ValueError(f"{field.name}: a bool default is true or false, got {text!r}")
        return text
    if field.type == "int32":
        return str(int(text, 0))
    import numpy as np

    value = np.float32(float(text))
    for digits in (6, 9):  # protoc's SimpleFtoa: the shortest of these that round-trips
        short = f"{float(value):.{digits}g}"
        if np.float32(float(short)) == value:
            return short
    raise AssertionError("9 significant digits always round-trip a float32")


def proto_fields(kind: str) -> str:
    """The body of the kind's configuration message, as the .proto declares it."""
    out = []
    for number, f in enumerate(CONF_FIELDS[kind], 1):
        if f.comment:
            out.append(f"  // {f.comment}")
        default = f" [default = {f.default}]" if f.default is not None else ""
        out.append(f"  optional {f.type} {f.name} = {number}{default};")
    return "\n".join(out) + "\n"


def conf_descriptor(kind: str, v: dict[str, str]) -> descriptor_pb2.FileDescriptorProto:
    """The FileDescriptorProto of the package's ``.proto`` (as protoc compiles it with the
    project folder on the include path), built from :data:`CONF_FIELDS`."""
    extends = KINDS[kind].extends
    assert extends is not None, f"a {kind} plugin has no configuration message"
    fdp = descriptor_pb2.FileDescriptorProto(
        name=f"{v['package']}/{v['ident']}.proto",
        package=v["package"],
        dependency=[SCHEMA_PROTO],
    )
    message = fdp.message_type.add(name=v["message"])
    for number, f in enumerate(CONF_FIELDS[kind], 1):
        field = message.field.add(
            name=f.name, number=number, label=_FDP.LABEL_OPTIONAL, type=_SCALAR_TYPES[f.type]
        )
        if f.default is not None:
            field.default_value = _default_value(f)
    fdp.extension.add(
        name=v["ext"],
        extendee=f".{extends}",
        number=int(v["number"]),
        label=_FDP.LABEL_OPTIONAL,
        type=_FDP.TYPE_MESSAGE,
        type_name=f".{v['package']}.{v['message']}",
    )
    return fdp


#: how each kind's example/job.conf (an MNIST MLP) uses the new type
_MNIST = "singa data mnist --out mnist"
_SGD = "type: kSGD momentum: 0.9\n  learning_rate { type: kFixed base_lr: 0.05 }"
EXAMPLE_DEFAULTS = {
    "prepare": _MNIST,
    "train_args": "",
    "alg": "alg: kBP",
    "updater": _SGD,
    "backend": "kvfile",
    "train_path": "mnist/train_data.bin",
    "test_path": "mnist/test_data.bin",
    "w1_init": "type: kUniform low: -0.05 high: 0.05",
    "act": "type: kSTanh",
}
EXAMPLES = {
    "layer": {"act": 'user_type: "$Type"  # its slope starts at init_slope: no param entry needed'},
    "worker": {"alg": 'alg: kUserAlg user_alg: "$Type" [$package.$ext] { accumulate: 2 }'},
    "updater": {
        "updater": 'user_type: "$Type" [$package.$ext] { beta1: 0.9 beta2: 0.99 }\n'
        "  weight_decay: 0.01\n  learning_rate { type: kFixed base_lr: 0.001 }"
    },
    "lr": {
        "updater": "type: kSGD momentum: 0.9\n  learning_rate {\n"
        '    user_type: "$Type" base_lr: 0.05\n'
        "    [$package.$ext] { warmup_steps: 20 decay_steps: 280 final_lr: 0.001 }\n  }"
    },
    "paramgen": {"w1_init": 'user_type: "$Type" [$package.$ext] { gain: 1.0 }'},
    "engine": {"train_args": " --engine $ident"},
    "store": {
        "prepare": _MNIST + " && python -m $package.copy_store mnist",
        "backend": "$ident",
        "train_path": "mnist/train_data.$ident",
        "test_path": "mnist/test_data.$ident",
    },
    "dataset": {
        "prepare": "singa data $ident --from CSV_FOLDER --out $ident-data",
        "train_path": "$ident-data/train_data.bin",
        "test_path": "$ident-data/test_data.bin",
    },
}

#: what the example type of each kind computes: the type is named after the plugin, so
#: `singa new-plugin` says what it wrote (a `scaled-tanh` layer starts as this PReLU)
EXAMPLE_IS = {
    "layer": "a parametric ReLU (learnable negative slope)",
    "worker": "back-propagation with gradient accumulation",
    "updater": "Lion",
    "lr": "linear warm-up then cosine decay",
    "paramgen": "orthogonal initialisation",
    "engine": "a minimal single-process engine",
    "store": "a zlib-compressed record store",
    "dataset": "a CSV-to-records converter",
}


def what_was_written(root: Path, kind: str) -> str:
    """The line `singa new-plugin` prints about the type it wrote: its name comes from the
    plugin's, its code is the scaffold's example of the kind, to be replaced."""
    v = names(root.name)
    module = f"{v['package']}/plugin.py"
    return (
        f"{v['Type']} is the scaffold's example {kind}, {EXAMPLE_IS[kind]}, under your "
        f"plugin's name: it works as written; replace its code in {module} (and its tests) "
        "with what you mean it to compute"
    )


#: README text per kind: what the type does, how a job uses it, what the tests check
README = {
    "layer": (
        "A parametric ReLU whose negative slope is a learnable Param (one per feature, or "
        "one for the whole input).",
        '```\nlayer {\n  name: "act1" user_type: "$Type" srclayers: "fc1"\n'
        "  [$package.$ext] { shared: false init_slope: 0.25 }   # optional\n"
        '  # param { name: "slope" ... }   optional: to name, share or init it otherwise\n'
        "}\n```",
        "the layer contract (`check_layer`: set-up shapes, gradients against central "
        "differences on plain and strided sources, kAggGrad, checkpoint round trip, "
        "determinism) and a short training run.",
    ),
    "worker": (
        "Back-propagation with gradient accumulation: `accumulate` mini-batches per update.",
        '```\ntrain_one_batch {\n  alg: kUserAlg user_alg: "$Type"\n'
        "  [$package.$ext] { accumulate: 4 }\n}\n```",
        "the worker contract (`check_worker`: Params collected before use, each gradient "
        "sent once), equality with kBP at `accumulate: 1`, and a short training run.",
    ),
    "updater": (
        "Lion (Chen et al., 2023): the sign of an interpolated momentum, with decoupled "
        "weight decay.",
        '```\nupdater {\n  user_type: "$Type" [$package.$ext] { beta1: 0.9 beta2: 0.99 }'
        "\n  weight_decay: 0.01\n  learning_rate { type: kFixed base_lr: 0.001 }\n}\n```",
        "the updater contract (`check_updater`: state snapshot/restore, clipping, decoupled "
        "weight decay through `decay_weights`, in-place updates), two steps by hand and a "
        "short training run.",
    ),
    "lr": (
        "Linear warm-up to `base_lr`, then cosine decay to `final_lr`.",
        '```\nlearning_rate {\n  user_type: "$Type" base_lr: 0.1\n'
        "  [$package.$ext] { warmup_steps: 100 decay_steps: 5000 final_lr: 0.001 }\n}\n```",
        "the schedule in closed form, and the rates a real run reports (`run_job`).",
    ),
    "paramgen": (
        "Orthogonal initialisation (Saxe et al., 2014) scaled by `gain`.",
        '```\nparam { name: "w1" init { user_type: "$Type" [$package.$ext] { gain: 1.0 } } }\n```',
        "orthogonality and determinism, and the initial values a real run checkpoints (`run_job`).",
    ),
    "engine": (
        "A minimal single-process engine (one worker, one server); a starting point for "
        "your own. It is chosen only by name.",
        "```bash\nsinga train job.conf --engine $ident\n```",
        "a real run with `--engine $ident` (`run_job`) gives exactly the parameters of "
        "the built-in inprocess engine.",
    ),
    "store": (
        "Records compressed with zlib, one file, written atomically "
        "(`$package.copy_store` converts kvfile stores).",
        '```\nstore_conf { backend: "$ident" path: "data/train_data.$ident" ... }\n```',
        "writing, reading, seeking and a damaged file, and a real run reading it (`run_job`).",
    ),
    "dataset": (
        "`singa data $ident` turns CSV files (`label,x1,...,xn` lines: train.csv, "
        "test.csv) into kvfile stores of records for kRecordInput.",
        "```bash\nsinga data $ident --from FOLDER_WITH_CSVS --out data\n```",
        "the records written, errors for a bad line, and a real run on the converted data "
        "(`run_job`).",
    ),
}

PROTO_NOTE = """
## Configuration and its field number

`$package/$ident.proto` extends `$extends` with `$ext` = **$number**. That message
reserves $range for plugins; `singa new-plugin` chose the slot from a hash of the
package name, so independent plugins rarely collide. If singa reports a clash with another
plugin, pick another free number in the range and recompile:

```bash
pip install 'singa-classic[proto]'   # protoc, needed only to compile an edited .proto
singa compile-proto $package/$ident.proto --out . -I .
```

`$package/${ident}_pb2.py` was generated by `singa new-plugin` (without protoc) from the
same declarations as the .proto; regenerate it this way after any change to the .proto.
"""

_NAME = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")


def field_number(package: str, message: str) -> int:
    """The scaffold's extension number for ``package`` extending ``message``."""
    lo, hi = EXTENSION_RANGES[message]
    digest = hashlib.sha256(f"{package}/{message}".encode()).digest()
    return lo + int.from_bytes(digest[:8], "big") % (hi - lo + 1)


def api_range() -> str:
    """The plugin API range a new plugin declares: this major version."""
    major = int(PLUGIN_API_VERSION.split(".")[0])
    return f">={major},<{major + 1}"


def names(name: str) -> dict[str, str]:
    """The identifiers derived from NAME (``scaled-tanh``)."""
    base = name[len("singa-") :] if name.startswith("singa-") else name
    words = base.split("-")
    camel = "".join(w.capitalize() for w in words)
    ident = "_".join(words)
    return {
        "name": base,
        "project": f"singa-{base}",
        "package": f"singa_{ident}",
        "ident": ident,
        "Camel": camel,
        "Type": f"k{camel}",
        "message": f"{camel}Proto",
        "ext": f"{ident}_conf",
        "core_dep": f"{CORE_DISTRIBUTION}>=0.1,<1",
        "api": api_range(),
    }


def _templates(kind: str):
    root = resources.files("singa_core.commands") / "scaffold_templates"
    yield from ((f.name, f) for f in (root / "common").iterdir() if f.name.endswith(".tmpl"))
    yield from ((f.name, f) for f in (root / kind).iterdir() if f.name.endswith(".tmpl"))


def _target(rel: str, v: dict[str, str]) -> str:
    """Where a template file goes in the package (``+`` separates folders)."""
    rel = rel[: -len(".tmpl")].replace("+", "/")
    return Template(rel).substitute(v)


def new_plugin(
    name: str, kind: str, out: Path, *, number: int | None = None
) -> tuple[Path, list[Path], str | None]:
    """Write the package (its ``_pb2`` module included, made without protoc); returns (its
    folder, the files written, a note or None)."""
    if kind not in KINDS:
        raise SingaError(
            f"unknown plugin kind '{kind}'",
            where="--kind",
            help=f"--kind is one of: {', '.join(KINDS)}",
        )
    if not _NAME.match(name):
        raise SingaError(
            f"plugin name '{name}' is not a lowercase name with dashes",
            where="NAME",
            help="use letters, digits and dashes, starting with a letter, e.g. `scaled-tanh`",
        )
    v = names(name)
    spec = KINDS[kind]
    v["kind"] = kind
    v["extends"] = spec.extends or ""
    if spec.extends:
        lo, hi = EXTENSION_RANGES[spec.extends]
        if number is None:
            number = field_number(v["package"], spec.extends)
        elif not lo <= number <= hi:
            raise SingaError(
                f"field number {number} is outside the range {spec.extends} reserves for "
                f"plugins ({lo} to {hi})",
                where="--field-number",
                help=f"choose --field-number between {lo} and {hi}",
            )
        v["number"] = str(number)
        v["range"] = f"{lo} to {hi}"
        v["fields"] = proto_fields(kind)
    elif number is not None:
        raise SingaError(
            f"a {kind} plugin has no configuration message to extend",
            where="--field-number",
            help="drop --field-number",
        )
    texts = {**EXAMPLE_DEFAULTS, **EXAMPLES[kind]}
    texts["about"], texts["usage"], texts["tests"] = README[kind]
    texts["proto_note"] = PROTO_NOTE if spec.extends else ""
    for key, text in texts.items():  # their own placeholders name the values above
        v[key] = Template(text).substitute(v)
    root = out / v["project"]
    _check_out(out, root)
    files = {}  # path inside the package folder -> text
    for rel, tmpl in sorted(_templates(kind)):
        files[_target(rel, v)] = Template(tmpl.read_text()).substitute(v)
    if spec.extends:  # the generated module, from the declarations the .proto holds
        from singa_core.schema import python_module_source

        fdp = conf_descriptor(kind, v)
        files[f"{v['package']}/{v['ident']}_pb2.py"] = python_module_source(
            fdp, source=f"{fdp.name} (singa new-plugin)"
        )
    _write_package(out, root, files)
    return root, [root / rel for rel in files], None


def _check_out(out: Path, root: Path) -> None:
    """Refuse an --out that cannot hold the package folder (a file, a FIFO, a device, a
    link to one, a read-only folder, a name too long) before anything is written."""
    from singa_core.running.paths import writable_folder_problem

    problem = writable_folder_problem(str(out), what="it")
    if problem is None:
        problem = writable_folder_problem(str(root), what="the package folder")
    if problem is not None:
        raise SingaError(
            f"cannot write the plugin package into --out {out}: {problem}",
            where=str(out),
            help="give --out a folder you can write to (it is created if missing), "
            "with names of at most 255 bytes",
        )
    try:
        taken = root.exists() and (not root.is_dir() or any(root.iterdir()))
    except OSError as exc:
        raise SingaError(
            f"cannot write the plugin package {root}: {exc.strerror or exc}",
            where=str(root),
            help="choose another NAME or --out folder",
        ) from None
    if taken:
        raise SingaError(
            f"{root} already exists and is not empty",
            where=str(root),
            help="choose another NAME or --out folder, or remove that folder",
        )


def _write_package(out: Path, root: Path, files: dict[str, str]) -> None:
    """Write the package into a hidden folder beside ``root`` and rename it into place, so
    a failure (a full disk, a folder that refuses writing) leaves nothing behind: neither
    a half package nor the folders --out asked to create."""
    import os
    import shutil
    import tempfile

    from singa_core.running.fileio import fsync_dir

    created = []  # the folders of --out made here, outermost first
    for folder in reversed([out, *out.parents]):
        if not folder.exists():
            created.append(folder)
    tmp = None
    try:
        out.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{root.name[:40]}.", suffix=".partial", dir=out))
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)
        for rel, text in files.items():
            target = tmp / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "w", encoding="utf-8") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
        os.rename(tmp, root)  # over an empty folder of that name, if there is one
        tmp = None
        fsync_dir(out)
    except BaseException as exc:  # an interrupt too: nothing is left behind
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        for folder in reversed(created):
            try:
                folder.rmdir()
            except OSError:
                pass
        if not isinstance(exc, OSError):
            raise
        name = exc.filename if isinstance(exc.filename, str) else str(out)
        shown = name.replace(str(tmp), str(root)) if tmp is not None else name
        raise SingaError(
            f"cannot write the plugin package {root}: {exc.strerror or exc} ({shown})",
            where=str(out),
            help="check the free disk space and that --out is a folder you can write to; "
            "nothing was left behind",
        ) from None


def _folder_arg(path: Path) -> str:
    """``path`` as pip takes it for a folder, never for a name on the package index
    (``./singa-foo``, not ``singa-foo``)."""
    text = str(path)
    return text if path.is_absolute() or text.startswith(".") else f"./{text}"


def next_steps(root: Path, kind: str) -> list[str]:
    """The commands to run after ``singa new-plugin`` wrote ``root``, verbatim from the
    folder it was run in: install the folder, list it, run its tests, train its example."""
    v = names(root.name)
    folder = _folder_arg(root)
    texts = {**EXAMPLE_DEFAULTS, **EXAMPLES[kind]}
    prepare = Template(texts["prepare"]).substitute(v)
    train_args = Template(texts["train_args"]).substitute(v)
    return [
        f"pip install {shlex.quote(folder)}",
        "singa list-plugins",
        f"pip install {shlex.quote(folder + '[test]')} && "
        f"pytest {shlex.quote(str(root / 'tests'))}",
        f"cd {shlex.quote(folder)} && {prepare} && singa train example/job.conf{train_args}",
    ]
