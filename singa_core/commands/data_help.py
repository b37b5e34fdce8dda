"""``singa data NAME --help``: the command's options and the converter's own.

``singa data`` passes the words after NAME to the converter (``configure(args)``), so the
command's generic help cannot list them; a converter describes them in ``options_help()``
(:class:`singa_core.dataset.DatasetConverter`) and this module prints them together.
"""

from __future__ import annotations

HELP_FLAGS = ("--help", "-h")

COMMON = """\
  --out DIR   folder to write SINGA's stores into  [required]
  --from DIR  folder holding the raw files (default: $SINGA_DATA/NAME, else download into
              ~/.cache/singa)
  -h, --help  Show this message and exit."""


def converter_help(args: list[str], host_factory) -> str | None:
    """The help text for ``singa data NAME ... --help`` when NAME is a registered dataset
    converter, else None (the command's own help is shown)."""
    if len(args) < 3 or args[0] != "data" or not any(a in HELP_FLAGS for a in args[2:]):
        return None
    name = args[1]
    if name.startswith("-"):
        return None
    host = host_factory()
    if name not in host.registry("dataset").names():
        return None
    conv = host.get("dataset", name, what="dataset")()
    own = conv.options_help().rstrip() if hasattr(conv, "options_help") else ""
    description = getattr(conv, "description", "") or ""
    text = [f"Usage: singa data {name} [OPTIONS]" + (" ..." if own else ""), ""]
    if description:
        text += [f"  {description}", ""]
    text += ["Options:", COMMON]
    if own:
        text += ["", f"Options of singa data {name}:", own]
    else:
        text += ["", f"singa data {name} takes no other arguments."]
    return "\n".join(text) + "\n"
