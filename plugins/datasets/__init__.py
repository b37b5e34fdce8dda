"""Built-in dataset converters (one per module), registered through the `singa_register_datasets` hook."""

from singa_core import hookimpl
from singa_core.dataset import DatasetConverter
from singa_core.discovery import register_submodule_types


@hookimpl
def singa_register_datasets(register):
    register_submodule_types(__name__, DatasetConverter, register)
