"""``singa new-plugin NAME --kind KIND``: write a ready plugin package.

The package (``DIR/singa-NAME/``) holds a ``pyproject.toml`` with the ``singa`` entry point
and the dependency on the core distribution, the plugin module (a working type of that kind,
declaring the plugin API range it was built for), a ``.proto`` extension of the message the
kind is configured by (compiled next to it when protoc is available), a README, an example
job.conf on MNIST and a test suite using the kit (:mod:`singa_core.testing`). The files come
from ``singa_core/commands/scaffold_templates/<kind>/`` (package data), filled in with
:class:`string.Template` (``$name`` placeholders).

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
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from string import Template

from singa_core import CORE_DISTRIBUTION, PLUGIN_API_VERSION
from singa_core.contracts.errors import SingaError

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
singa compile-proto $package/$ident.proto --out . -I .
```
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
    name: str, kind: str, out: Path, *, number: int | None = None, compile_proto: bool = True
) -> tuple[Path, list[Path], str | None]:
    """Write the package; returns (its folder, the files written, a note or None)."""
    if kind not in KINDS:
        raise SingaError(
            f"unknown plugin kind '{kind}'",
            help=f"--kind is one of: {', '.join(KINDS)}",
        )
    if not _NAME.match(name):
        raise SingaError(
            f"plugin name '{name}' is not a lowercase name with dashes",
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
                help=f"choose --field-number between {lo} and {hi}",
            )
        v["number"] = str(number)
        v["range"] = f"{lo} to {hi}"
    elif number is not None:
        raise SingaError(
            f"a {kind} plugin has no configuration message to extend",
            help="drop --field-number",
        )
    texts = {**EXAMPLE_DEFAULTS, **EXAMPLES[kind]}
    texts["about"], texts["usage"], texts["tests"] = README[kind]
    texts["proto_note"] = PROTO_NOTE if spec.extends else ""
    for key, text in texts.items():  # their own placeholders name the values above
        v[key] = Template(text).substitute(v)
    root = out / v["project"]
    if root.exists() and any(root.iterdir()):
        raise SingaError(
            f"{root} already exists and is not empty",
            where=str(root),
            help="choose another NAME or --out folder, or remove that folder",
        )
    written = []
    for rel, tmpl in sorted(_templates(kind)):
        target = root / _target(rel, v)
        text = Template(tmpl.read_text()).substitute(v)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        written.append(target)
    note = None
    protos = [p for p in written if p.suffix == ".proto"]
    if protos and compile_proto:
        from singa_core.schema import compile_plugin_protos

        try:
            compile_plugin_protos([str(p) for p in protos], str(root), [str(root)])
            written += [p.with_name(p.stem + "_pb2.py") for p in protos]
        except RuntimeError as exc:  # no protoc (grpcio-tools) installed
            rels = " ".join(str(p.relative_to(root)) for p in protos)
            note = (
                f"not compiled ({exc}); run `singa compile-proto {rels} --out . -I .` in "
                f"{root} before installing"
            )
    return root, written, note
