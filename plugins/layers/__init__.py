"""Built-in layers (one per module), registered through the `singa_register_layers` hook."""

from singa_core import hookimpl
from singa_core.discovery import register_submodule_types
from singa_core.layer import Layer


@hookimpl
def singa_register_layers(register):
    register_submodule_types(__name__, Layer, register)
