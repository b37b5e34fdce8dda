"""singa: SINGA 0.x's config-driven deep learning in Python, extended through plugins.

The path of a job: ``config`` (job.conf -> JobProto) -> ``plugin_host`` (registries) ->
``net`` (NeuralNet: layers, Params) -> ``engine`` (workers + parameter servers) ->
``training`` (the loop: train/test/display/checkpoint).
"""

from singa_core.hookspecs import hookimpl

__version__ = "0.1.0"
__all__ = ["hookimpl", "__version__"]
