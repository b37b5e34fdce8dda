"""Built-in engines (one per module), registered through the `singa_register_engines` hook."""

from singa_core import hookimpl
from singa_core.engine import Engine
from singa_core.plugin_host.discovery import register_submodule_types


@hookimpl
def singa_register_engines(register):
    register_submodule_types(__name__, Engine, register)
