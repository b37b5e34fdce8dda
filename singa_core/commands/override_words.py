"""``-o`` values split by a space (``-o train_steps 100``): found before click reads them,
so the error names the word to write (``singa train`` and ``singa submit`` alike)."""

from __future__ import annotations

import re

from singa_core.contracts.errors import SingaError

_NUMBER = re.compile(r"-?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def override_word_error(args: list[str]) -> SingaError | None:
    """An ``-o`` value must be one FIELD=VALUE word. ``-o train_steps 100`` (click: "Got
    unexpected extra argument (100)") and ``-o train_steps = 100`` are refused naming the
    word to write; so is ``-o train_steps`` with nothing to join. Returns the error, or
    None when every value is one word."""
    i = 0
    while i < len(args):
        arg, value, at = args[i], None, i
        if arg == "--":
            return None
        if arg in ("-o", "--override") and i + 1 < len(args):
            value, at = args[i + 1], i + 1
        elif arg.startswith("--override="):
            value = arg.split("=", 1)[1]
        elif arg.startswith("-o") and not arg.startswith("--") and len(arg) > 2:
            value = arg[2:]
        i = at + 1
        if value is None or "=" in value:
            continue
        after = args[at + 1 : at + 3]  # the words a space split off: "100", "= 100", "=100"
        used = after[:2] if after[:1] == ["="] else after[:1]
        word = "".join(used).lstrip("=")
        option_like = used and used[-1].startswith("-") and not _NUMBER.fullmatch(used[-1])
        joined = f"{value}={word}" if word and not option_like else None
        shown = _printable(" ".join([value, *used] if joined else [value]))
        return SingaError(
            "an override must look like FIELD=VALUE, one word",
            where=f"command line: -o {shown}",
            help=f"write -o {_printable(joined)} (no spaces around '=')"
            if joined
            else f"write -o {_printable(value)}=VALUE, e.g. -o train_steps=100",
        )
    return None


def _printable(text: str) -> str:
    return text if text.isprintable() else text.encode("unicode_escape").decode()
