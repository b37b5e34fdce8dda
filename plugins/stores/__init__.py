"""Built-in record stores (one per module), registered through the `singa_register_stores` hook."""

from singa_core import hookimpl
from singa_core.plugin_host.discovery import register_submodule_types
from singa_core.store import Store


@hookimpl
def singa_register_stores(register):
    register_submodule_types(__name__, Store, register)
