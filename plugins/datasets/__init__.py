"""Built-in types of this kind, one per module, registered through the plugin hook below."""

from singa_core import hookimpl
from singa_core.dataset import DatasetConverter
from singa_core.plugin_host.discovery import register_submodule_types


@hookimpl
def singa_register_datasets(register):
    register_submodule_types(__name__, DatasetConverter, register)
