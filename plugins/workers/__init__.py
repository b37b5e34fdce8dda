"""Built-in types of this kind, one per module, registered through the plugin hook below."""

from singa_core import hookimpl
from singa_core.plugin_host.discovery import register_submodule_types
from singa_core.worker import Worker


@hookimpl
def singa_register_workers(register):
    register_submodule_types(__name__, Worker, register)
