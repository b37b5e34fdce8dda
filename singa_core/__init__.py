"""singa: SINGA 0.x's config-driven deep learning in Python, extended through plugins.

The rooms, from the bottom up (a room imports only the rooms before it):

* :mod:`singa_core.contracts`: the plugin contracts (Layer, Param, Updater, Worker, Store,
  Engine, DatasetConverter, the hooks) and the services plugins call (errors, BLAS);
* :mod:`singa_core.schema`: the generated ``singa.*`` protobuf messages of proto/;
* :mod:`singa_core.plugin_host`: entry points -> registries;
* :mod:`singa_core.jobconf`: job.conf text -> JobProto, with located errors;
* :mod:`singa_core.netbuilder`: NetProto -> NeuralNet (layers, Params, unrolling,
  partitioning, slicing);
* :mod:`singa_core.running`: a prepared job, the training loop, checkpoints, reporting;
* :mod:`singa_core.inference`: using a trained model (the deploy net with a checkpoint's
  Params: ``predict``, ONNX and safetensors export);
* :mod:`singa_core.api`: ``singa_core.Job``, the Python API;
* :mod:`singa_core.tuning`: ``singa tune``'s studies over a job.conf's fields (Optuna);
* :mod:`singa_core.commands`: the ``singa`` command line and its tools;
* :mod:`singa_core.testing`: the plugin author's kit.

The path of a job: ``jobconf`` (job.conf -> JobProto) -> ``plugin_host`` (registries) ->
``running.job`` (checks, nets from ``netbuilder``) -> an engine plugin (workers + parameter
servers) -> ``running.training`` (the loop: train/test/display/checkpoint).

Plugin API 1.0 paths (kept for plugins; each is the module of the same name in
``contracts``): ``singa_core.layer``, ``.param``, ``.updater``, ``.worker``, ``.stub``,
``.store``, ``.dataset``, ``.engine``, ``.hookspecs``, ``.errors``, ``.blas``, the
services ``.device``, ``.kernels``, ``.capture``, ``.sequences``, ``.memory``, ``.names``,
``.resources``, ``.jit``, ``.numpy_loops``, plus
``singa_core.testing``, ``singa_core.plugin_host.get_host``, :data:`hookimpl` and
:class:`Job`.
"""

# A Ctrl-C while the `singa` command loads (this package, pluggy, typer, ...) ends in one
# line and exit 130 from the first statement on: SIGINT raises SystemExit(130) until the
# command line restores Python's handler (commands/cli.py, main). Only in the `singa`
# process itself (its console script, or `python -m singa_core...`), never in a library
# user's process or a process the command starts (multiprocessing is imported there before
# this). The handler is installed through the builtin `_signal` (no module to load: the
# `signal` module's enum set-up was a window where a Ctrl-C gave a traceback), and a Ctrl-C
# before it is in place (within this `try`) is turned into the same ending. What Python
# does before this file's first statement is out of reach (docs/guide/running.md).


def _singa_command() -> bool:
    """Whether this process is the `singa` command itself (see above)."""
    import sys

    return bool(
        # the console script, or python -m (an embedded interpreter may have no argv)
        (getattr(sys, "argv", None) or [""])[0].rsplit("/", 1)[-1] in ("singa", "-m")
        and "multiprocessing" not in sys.modules
        and not hasattr(sys, "ps1")
    )


try:
    import sys as _sys

    if _singa_command():
        import _signal

        def _interrupted_while_loading(signum, frame):
            print("interrupted", file=_sys.stderr, flush=True)
            raise SystemExit(130)

        try:
            if _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:
                _signal.signal(_signal.SIGINT, _interrupted_while_loading)
        except ValueError:  # not the main thread
            pass
except KeyboardInterrupt:
    if not _singa_command():
        raise
    import sys as _sys

    print("interrupted", file=_sys.stderr, flush=True)
    raise SystemExit(130) from None

from singa_core.contracts.hookspecs import hookimpl  # noqa: E402 - after the handler
from singa_core.contracts.version import (  # noqa: E402
    CORE_DISTRIBUTION,
    PLUGIN_API_VERSION,
    __version__,
)

__all__ = ["hookimpl", "__version__", "PLUGIN_API_VERSION", "CORE_DISTRIBUTION", "Job"]


def __getattr__(name: str):
    # the Python API (singa_core.api.job) on first use: `import singa_core` stays light
    if name in ("Job", "RunResult", "TestResult", "Event"):
        from singa_core.api import job as api

        return getattr(api, name)
    raise AttributeError(f"module 'singa_core' has no attribute {name!r}")
