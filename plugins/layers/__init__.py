"""Built-in layers (one per module), registered through the `singa_register_layers` hook."""

from singa_core import hookimpl
from singa_core.layer import Layer
from singa_core.plugin_host.discovery import register_submodule_types

#: alias_note of the layers that also answer to a cuDNN type name (kCudnnConv, ...)
CUDNN_ALIAS_NOTE = "the CPU implementation: this engine runs cuDNN layer types on the CPU"


@hookimpl
def singa_register_layers(register):
    register_submodule_types(__name__, Layer, register)
