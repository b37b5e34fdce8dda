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
    from singa_core.schema import common_pb2, job_pb2

__all__ = ["common_pb2", "compile_plugin_protos", "job_pb2", "source_descriptor_set"]

#: The repository checkout this package lives in (``proto/`` is next to ``singa_core/``).
REPO_ROOT = Path(__file__).resolve().parents[2]
#: Where the schema's ``.proto`` sources live.
PROTO_DIR = REPO_ROOT / "proto"
#: The virtual directory the sources are compiled under, so that the descriptors are
#: named ``singa_core/schema/<name>.proto`` and the generated modules land in this package.
VIRTUAL_DIR = "singa_core/schema"
#: The schema's source files, in compilation order.
PROTO_NAMES = ("job.proto", "common.proto")

_INSTALL_HELP = "help: pip install 'singa-classic[proto]'  (grpcio-tools bundles protoc)"


def __getattr__(name: str) -> ModuleType:
    # The generated modules are imported on first use, so that the package (and thus
    # ``python -m singa_core.schema.generate``) still imports when they are missing or
    # stale.
    if name in ("job_pb2", "common_pb2"):
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
    from singa_core.schema import common_pb2, job_pb2

    fds = descriptor_pb2.FileDescriptorSet()
    for module in (job_pb2, common_pb2):
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
