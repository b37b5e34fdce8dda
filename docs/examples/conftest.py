"""Runs the example plugin distributions' tests as if each were pip-installed.

Each folder here with a ``pyproject.toml`` is a plugin distribution a doc shows (see
tests/core/test_docs_examples.py, which copies this folder, compiles the ``.proto`` files
with ``singa compile-proto`` and runs ``pytest`` on the copy). Instead of ``pip install``,
this puts each distribution's folder on ``sys.path`` and registers the modules its
``[project.entry-points.singa]`` names with singa's plugin host, as the installed entry
points would be.
"""

import importlib
import sys
import tomllib
from pathlib import Path

import singa_core.plugin_host.host as plugin_host
from singa_core.plugin_host.registry import Provider

HERE = Path(__file__).resolve().parent
DISTRIBUTIONS = sorted(path.parent for path in HERE.glob("*/pyproject.toml"))
for _folder in DISTRIBUTIONS:
    sys.path.insert(0, str(_folder))


def _host_with_the_examples() -> plugin_host.PluginHost:
    host = plugin_host.PluginHost()
    host.load_entry_points()  # the built-in types
    for folder in DISTRIBUTIONS:
        project = tomllib.loads((folder / "pyproject.toml").read_text())["project"]
        for name, target in project["entry-points"]["singa"].items():
            provider = Provider(name, project["name"], project["version"])
            host.add_plugin(importlib.import_module(target), name=name, provider=provider)
    assert not host.failures, [str(f.warning()) for f in host.failures]
    return host


plugin_host._default_host = _host_with_the_examples()
