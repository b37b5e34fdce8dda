"""Built-in updaters (one per module), registered through the `singa_register_updaters` hook."""

from singa_core import hookimpl
from singa_core.plugin_host.discovery import register_submodule_types
from singa_core.updater import Updater


@hookimpl
def singa_register_updaters(register):
    register_submodule_types(__name__, Updater, register)
