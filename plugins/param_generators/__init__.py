"""Built-in param initialisers (one per module), registered through the `singa_register_param_generators` hook."""

from singa_core import hookimpl
from singa_core.discovery import register_submodule_types
from singa_core.param import ParamGenerator


@hookimpl
def singa_register_param_generators(register):
    register_submodule_types(__name__, ParamGenerator, register)
