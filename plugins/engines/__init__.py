"""Built-in engines (one per module), registered through the `singa_register_engines` hook."""

from singa_core import hookimpl
from singa_core.discovery import register_submodule_types
from singa_core.engine import Engine


@hookimpl
def singa_register_engines(register):
    register_submodule_types(__name__, Engine, register)
