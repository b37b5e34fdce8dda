"""Built-in learning-rate change methods (one per module), registered through the `singa_register_lr_changes` hook."""

from singa_core import hookimpl
from singa_core.discovery import register_submodule_types
from singa_core.updater import LRChange


@hookimpl
def singa_register_lr_changes(register):
    register_submodule_types(__name__, LRChange, register)
