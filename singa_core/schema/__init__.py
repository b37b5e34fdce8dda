"""The SINGA 0.3 configuration schema as Python protobuf modules.

``job_pb2`` (JobProto, NetProto, LayerProto, ...) and ``common_pb2`` (RecordProto,
BlobProtos, ...) are generated from ``proto/job.proto`` and ``proto/common.proto`` and
checked in; regenerate them with ``python -m singa_core.schema.generate``. Their
descriptors are named ``singa_core/schema/job.proto`` and ``singa_core/schema/common.proto``,
so a plugin's own ``.proto`` extends the schema with::

    import "singa_core/schema/job.proto";
    extend singa.LayerProto { optional FooProto foo_conf = 1001; }

and is compiled by :func:`compile_plugin_protos`. Compiling needs grpcio-tools
(``pip install 'singa-classic[proto]'``); using the checked-in modules needs only protobuf.

Without protoc, :func:`python_module_source` writes the ``_pb2`` module of a
``FileDescriptorProto`` built in Python (what ``singa new-plugin`` does for the ``.proto``
it writes): the module protoc's Python generator would write, adding the descriptor's
serialized form to the default pool and building its classes with protobuf's runtime.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from google.protobuf import descriptor_pb2

if TYPE_CHECKING:
    from singa_core.schema import common_pb2, job_pb2, tune_pb2

__all__ = [
    "common_pb2",
    "compile_plugin_protos",
    "job_pb2",
    "python_module_source",
    "tune_pb2",
    "source_descriptor_set",
]

#: The repository checkout this package lives in (``proto/`` is next to ``singa_core/``).
REPO_ROOT = Path(__file__).resolve().parents[2]
#: Where the schema's ``.proto`` sources live.
PROTO_DIR = REPO_ROOT / "proto"
#: The virtual directory the sources are compiled under, so that the descriptors are
#: named ``singa_core/schema/<name>.proto`` and the generated modules land in this package.
VIRTUAL_DIR = "singa_core/schema"
#: The schema's source files, in compilation order.
PROTO_NAMES = ("job.proto", "common.proto", "tune.proto")

_INSTALL_HELP = (
    "help: pip install 'singa-classic[proto]'  (grpcio-tools bundles protoc); a plugin "
    "needs it only after editing its .proto: `singa new-plugin` writes the _pb2 module itself"
)


def __getattr__(name: str) -> ModuleType:
    # The generated modules are imported on first use, so that the package (and thus
    # ``python -m singa_core.schema.generate``) still imports when they are missing or
    # stale.
    if name in ("job_pb2", "common_pb2", "tune_pb2"):
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _require_grpc_tools(purpose: str) -> None:
    try:
        import grpc_tools.protoc  # noqa: F401
    except ImportError as exc:
        raise RuntimeError(
            f"{purpose} needs protoc from the grpcio-tools package, which is not installed\n"
            f"{_INSTALL_HELP}"
        ) from exc


def _run_protoc(args: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """Run grpc_tools' protoc in a child process (so its stderr can be captured).

    ``python -m grpc_tools.protoc`` also puts the well-known types
    (``google/protobuf/*.proto``) on the include path.
    """
    return subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", *args],
        capture_output=True,
        text=True,
        check=False,
    )


def _schema_sources() -> list[str]:
    missing = [n for n in PROTO_NAMES if not (PROTO_DIR / n).is_file()]
    if missing:
        raise RuntimeError(
            f"schema sources not found: {', '.join(str(PROTO_DIR / n) for n in missing)}\n"
            "help: the .proto sources are only in a source checkout of singa, "
            "not in an installed wheel"
        )
    return [f"{VIRTUAL_DIR}/{n}" for n in PROTO_NAMES]


def _schema_protoc_args() -> list[str]:
    return [f"--proto_path={VIRTUAL_DIR}={PROTO_DIR}", *_schema_sources()]


def _protoc_failed(what: str, result: subprocess.CompletedProcess[str]) -> str:
    detail = (result.stderr or result.stdout or "").strip() or f"exit status {result.returncode}"
    return f"protoc failed to compile {what}:\n{detail}"


def source_descriptor_set() -> descriptor_pb2.FileDescriptorSet:
    """Compile ``proto/*.proto`` now and return their descriptors.

    The files are compiled under the same virtual path as the checked-in modules, so
    each ``FileDescriptorProto`` is directly comparable with the one embedded in
    ``job_pb2`` / ``common_pb2`` (that is how the staleness test works).
    """
    _require_grpc_tools("compiling the schema")
    with tempfile.TemporaryDirectory(prefix="singa-schema-") as tmp:
        out = Path(tmp) / "schema.pb"
        result = _run_protoc([f"--descriptor_set_out={out}", *_schema_protoc_args()])
        if result.returncode != 0:
            raise RuntimeError(
                _protoc_failed("the schema", result) + "\nhelp: fix the errors in proto/*.proto"
            )
        fds = descriptor_pb2.FileDescriptorSet()
        fds.ParseFromString(out.read_bytes())
    return fds


def checked_in_descriptor_set() -> descriptor_pb2.FileDescriptorSet:
    """The descriptors embedded in the checked-in ``job_pb2`` and ``common_pb2``."""
    from singa_core.schema import common_pb2, job_pb2, tune_pb2

    fds = descriptor_pb2.FileDescriptorSet()
    for module in (job_pb2, common_pb2, tune_pb2):
        fds.file.add().ParseFromString(module.DESCRIPTOR.serialized_pb)
    return fds


def compile_plugin_protos(files: list[str], out_dir: str, include_dirs: Iterable[str] = ()) -> None:
    """Compile a plugin's ``.proto`` files into ``*_pb2.py`` modules in ``out_dir``.

    The files may ``import "singa_core/schema/job.proto"`` (or ``common.proto``) and
    extend its messages, e.g. ``extend singa.LayerProto { optional FooProto foo_conf =
    1001; }``; the schema is taken from the installed (checked-in) modules, so no
    ``.proto`` sources of singa are needed. Each file's directory and every entry of
    ``include_dirs`` are on the import path; the generated module's name follows the
    file's path relative to the first one containing it (``foo.proto`` → ``foo_pb2.py``).

    Raises :class:`~singa_core.contracts.errors.SingaError` with protoc's messages when a file
    does not compile, and RuntimeError when grpcio-tools is missing.
    """
    from singa_core.contracts.errors import SingaError

    if isinstance(files, str | Path):
        files = [str(files)]
    if not files:
        raise SingaError("no .proto files to compile", help="pass at least one .proto file")
    sources = [Path(f).resolve() for f in files]
    for src in sources:
        if not src.is_file():
            raise SingaError(f"no such .proto file: {src}", help="check the path")
    _require_grpc_tools("compiling a plugin's .proto")

    includes: list[str] = []
    for d in [*(Path(i).resolve() for i in include_dirs), *(s.parent for s in sources)]:
        if str(d) not in includes:
            includes.append(str(d))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    with tempfile.TemporaryDirectory(prefix="singa-plugin-proto-") as tmp:
        schema_set = Path(tmp) / "singa_schema.pb"
        schema_set.write_bytes(checked_in_descriptor_set().SerializeToString())
        result = _run_protoc(
            [
                f"--descriptor_set_in={schema_set}",
                *(f"-I{d}" for d in includes),
                f"--python_out={out}",
                *(str(s) for s in sources),
            ]
        )
    if result.returncode != 0:
        detail = (result.stderr or result.stdout or "").strip()
        raise SingaError(
            f"protoc failed to compile {', '.join(str(s) for s in sources)}",
            notes=detail.splitlines() or [f"protoc exit status {result.returncode}"],
            help=(
                "fix the .proto errors above; the schema is imported as "
                '`import "singa_core/schema/job.proto";` and user layer confs extend '
                "singa.LayerProto with field numbers 1001-1100 (other messages: 101-200)"
            ),
        )


def _module_of(proto_name: str) -> str:
    """The Python module protoc generates for ``a/b/c.proto``: ``a.b.c_pb2``."""
    return proto_name[: -len(".proto")].replace("/", ".").replace("-", "_") + "_pb2"


def _module_alias(module: str) -> str:
    """protoc's import alias of a dependency (``singa__core_dot_schema_dot_job__pb2``)."""
    return module.replace("_", "__").replace(".", "_dot_")


def _descriptor_offsets(fdp: descriptor_pb2.FileDescriptorProto, blob: bytes):
    """(global name, start, end) of each message and enum's serialized proto in ``blob``,
    the ``_serialized_start/_end`` protoc's module sets for the pure-Python runtime."""
    out = []

    def walk(prefix: str, messages, enums) -> None:
        for enum in enums:
            out.append((f"_{prefix}{enum.name.upper()}", enum.SerializeToString()))
        for msg in messages:
            name = f"{prefix}{msg.name.upper()}"
            out.append((f"_{name}", msg.SerializeToString()))
            walk(f"{name}_", msg.nested_type, msg.enum_type)

    walk("", fdp.message_type, fdp.enum_type)
    offsets = []
    for name, part in out:  # each is unique in the file: it starts with its own name
        at = blob.find(part)
        if at < 0:  # cannot happen for a message serialized by this runtime
            raise ValueError(f"{name} not found in the serialized file")
        offsets.append((name, at, at + len(part)))
    return offsets


def python_module_source(fdp: descriptor_pb2.FileDescriptorProto, *, source: str = "") -> str:
    """The ``_pb2`` module of ``fdp`` without protoc: what protoc's Python generator writes
    (the serialized descriptor added to the default pool, classes built by
    ``google.protobuf.internal.builder``), ready to import.

    ``fdp`` is checked first in a private pool holding the schema (and the well-known
    types), so a wrong type or extendee is an error here, not at import. Its dependencies
    become imports of their generated modules (``singa_core/schema/job.proto`` ->
    ``singa_core.schema.job_pb2``). ``source`` names what it was made from, for the header.
    """
    from google.protobuf import descriptor_pool

    if not fdp.name.endswith(".proto"):
        raise ValueError(f"a FileDescriptorProto's name ends with .proto, got {fdp.name!r}")
    pool = descriptor_pool.DescriptorPool()
    for dep in checked_in_descriptor_set().file:
        pool.Add(dep)
    for dep in fdp.dependency:
        if dep.startswith("google/protobuf/"):
            module = importlib.import_module(_module_of(dep).replace("/", "."))
            pool.AddSerializedFile(module.DESCRIPTOR.serialized_pb)
    pool.Add(fdp)
    pool.FindFileByName(fdp.name)  # builds (checks) it: unknown types raise TypeError/KeyError

    blob = fdp.SerializeToString(deterministic=True)
    module = _module_of(fdp.name)
    lines = [
        "# -*- coding: utf-8 -*-",
        f"# Generated by singa without protoc from {source or fdp.name}. DO NOT EDIT!",
        "# Edit the .proto and regenerate with `singa compile-proto` instead.",
        f"# source: {fdp.name}",
        '"""Generated protocol buffer code."""',
        "",
        "from google.protobuf import descriptor as _descriptor",
        "from google.protobuf import descriptor_pool as _descriptor_pool",
        "from google.protobuf import symbol_database as _symbol_database",
        "from google.protobuf.internal import builder as _builder",
        "",
        "_sym_db = _symbol_database.Default()",
        "",
    ]
    for dep in fdp.dependency:
        package, _, name = _module_of(dep).rpartition(".")
        target = f"from {package} import {name}" if package else f"import {name}"
        lines.append(f"{target} as {_module_alias(_module_of(dep))}")
    lines += [
        "",
        f"DESCRIPTOR = _descriptor_pool.Default().AddSerializedFile({blob!r})",
        "",
        "_globals = globals()",
        "_builder.BuildMessageAndEnumDescriptors(DESCRIPTOR, _globals)",
        f"_builder.BuildTopDescriptorsAndMessages(DESCRIPTOR, {module!r}, _globals)",
        "if not _descriptor._USE_C_DESCRIPTORS:",
        "    DESCRIPTOR._loaded_options = None",
    ]
    for name, start, end in _descriptor_offsets(fdp, blob):
        lines.append(f"    _globals[{name!r}]._serialized_start = {start}")
        lines.append(f"    _globals[{name!r}]._serialized_end = {end}")
    return "\n".join(lines) + "\n"
