"""Which format a file singa writes has: its ``--format`` and its name's suffix must agree.

``singa export --out p.npz`` used to write ONNX under that name; now the format comes from
the suffix when ``--format`` is not given, and a ``--format`` the suffix contradicts (or a
suffix that names no export format) is an error naming both.
"""

from __future__ import annotations

from pathlib import Path

from singa_core.contracts.errors import SingaError

#: export format -> the suffix its files carry
EXPORT_SUFFIXES = {"onnx": ".onnx", "safetensors": ".safetensors"}


def export_format(out: Path, fmt: str | None) -> str:
    """The export format for ``--out out`` and ``--format fmt`` (None: not given)."""
    if fmt is not None and fmt not in EXPORT_SUFFIXES:
        raise SingaError(
            f"unknown export format {fmt!r}",
            where="--format",
            help="use --format onnx or --format safetensors",
        )
    suffix = Path(out).suffix.lower()
    by_suffix = next((f for f, s in EXPORT_SUFFIXES.items() if s == suffix), None)
    if by_suffix is not None and fmt in (None, by_suffix):
        return by_suffix
    shown = f"suffix {suffix!r}" if suffix else "no suffix"
    if fmt is None:
        raise SingaError(
            f"cannot tell the export format of {Path(out).name!r}: it has {shown}",
            where="--out",
            help="name it FILE.onnx or FILE.safetensors (or give --format)",
        )
    raise SingaError(
        f"--format {fmt} does not agree with --out {Path(out).name!r}, which has {shown}",
        where="--out",
        help=f"name the file FILE{EXPORT_SUFFIXES[fmt]}, or give the --format its name says",
    )
