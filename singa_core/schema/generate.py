"""Regenerate the checked-in schema modules from ``proto/*.proto``.

Usage (from any directory)::

    python -m singa_core.schema.generate

Writes ``singa_core/schema/{job,common}_pb2.py`` and ``.pyi`` via grpcio-tools' protoc,
compiling ``proto/`` under the virtual path ``singa_core/schema`` so that the descriptors
are named ``singa_core/schema/job.proto`` and ``singa_core/schema/common.proto``.
"""

from __future__ import annotations

import sys

from singa_core.schema import (
    PROTO_NAMES,
    REPO_ROOT,
    VIRTUAL_DIR,
    _protoc_failed,
    _require_grpc_tools,
    _run_protoc,
    _schema_protoc_args,
)


def generate() -> list[str]:
    """Run protoc; returns the paths written (relative to the repository root)."""
    _require_grpc_tools("regenerating the schema modules")
    result = _run_protoc(
        [f"--python_out={REPO_ROOT}", f"--pyi_out={REPO_ROOT}", *_schema_protoc_args()]
    )
    if result.returncode != 0:
        raise RuntimeError(
            _protoc_failed("the schema", result) + "\nhelp: fix the errors in proto/*.proto"
        )
    written = []
    for name in PROTO_NAMES:
        stem = name.removesuffix(".proto")
        written += [f"{VIRTUAL_DIR}/{stem}_pb2.py", f"{VIRTUAL_DIR}/{stem}_pb2.pyi"]
    return written


def main() -> int:
    try:
        written = generate()
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for path in written:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
