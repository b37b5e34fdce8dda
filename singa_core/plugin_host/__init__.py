"""The plugin host: finds plugins through entry points and fills the registries.

* :mod:`.host`: PluginHost (load each ``singa`` entry point, check its API range and proto
  extensions, record failures) and :func:`get_host`;
* :mod:`.registry`: one Registry per kind of pluggable object, each documenting the
  contract of what it holds;
* :mod:`.discovery`: the helper a plugin package calls to register one type per module.

Imports only :mod:`singa_core.contracts` and :mod:`singa_core.schema`; never the net
builder, the runner or the commands, and never a concrete type: every type, built-in or
not, arrives through a plugin.
"""

# ``from singa_core.plugin_host import get_host`` is the path plugins have used since 1.0
from singa_core.plugin_host.host import PluginHost, get_host, reset_host  # noqa: E402

__all__ = ["PluginHost", "get_host", "reset_host"]
