"""The tools behind the ``singa`` command line.

* :mod:`.cli`: the typer app (every subcommand, user errors as exit 2 without traceback);
* :mod:`.timing` (``singa time``), :mod:`.graph` (``--dry-run --graph``),
  :mod:`.plotting` (``singa plot``), :mod:`.datasets` (``singa data``'s raw files),
  :mod:`.scaffold` and ``scaffold_templates/`` (``singa new-plugin``).

The top room: it may import every other room; nothing in singa_core imports it (the
plugin author's kit in :mod:`singa_core.testing` drives the CLI in-process).
"""
