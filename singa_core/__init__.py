"""singa: SINGA 0.x's config-driven deep learning in Python, extended through plugins.

The path of a job: ``config`` (job.conf -> JobProto) -> ``plugin_host`` (registries) ->
``net`` (NeuralNet: layers, Params) -> ``engine`` (workers + parameter servers) ->
``training`` (the loop: train/test/display/checkpoint).
"""

from singa_core.hookspecs import hookimpl

__version__ = "0.1.0"

#: The version of the plugin API (hooks, registries' contracts, Layer/Worker/Updater/...
#: interfaces) this core implements, MAJOR.MINOR: a MINOR release only adds to the API, a
#: MAJOR one may break plugins. A plugin states what it was built for with a module
#: attribute ``SINGA_PLUGIN_API = ">=1,<2"`` or its dependency on ``singa-classic``; one
#: built for another major version is skipped at load (see singa_core.plugin_host).
PLUGIN_API_VERSION = "1.0"
#: the distribution plugins depend on
CORE_DISTRIBUTION = "singa-classic"

__all__ = ["hookimpl", "__version__", "PLUGIN_API_VERSION", "CORE_DISTRIBUTION", "Job"]


def __getattr__(name: str):
    # the Python API (singa_core.api) on first use: `import singa_core` stays light
    if name in ("Job", "RunResult", "TestResult", "Event"):
        from singa_core import api

        return getattr(api, name)
    raise AttributeError(f"module 'singa_core' has no attribute {name!r}")
