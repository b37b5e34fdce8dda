"""The hooks a singa plugin implements.

A plugin is a module named by an entry point in the ``singa`` group::

    [project.entry-points.singa]
    foo = "singa_foo.plugin"

It implements one or more of the hooks below with :data:`hookimpl`. Each hook receives a
``register`` callable bound to that plugin; the plugin calls it once per type it provides::

    from singa_core import hookimpl

    @hookimpl
    def singa_register_layers(register):
        register("kFoo", FooLayer)            # usable as user_type: "kFoo"
        register("kEmbedding", MyEmbedding, user_type=True)   # user_type: "kEmbedding",
                                               # next to the built-in type: kEmbedding

``register(name, obj, aliases=(), user_type=None)``: ``user_type=True`` puts the name in
the namespace job.conf selects with the string field (``user_type``, ``user_alg``),
``False`` in the one it selects with the enum field (``type``, ``alg``); by default a value
name of the enum goes to the enum namespace and any other string to the user namespace
(see :mod:`singa_core.plugin_host.registry`).

The contract of what each kind of object must be is documented next to its registry in
:mod:`singa_core.plugin_host.registry`. Built-in types (``plugins/``) use these same hooks.
"""

from __future__ import annotations

import pluggy

PROJECT = "singa"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def singa_register_layers(register):
    """Register Layer classes: ``register(name, cls, aliases=(), user_type=None)``."""


@hookspec
def singa_register_workers(register):
    """Register Worker classes (TrainOneBatch algorithms), keyed by AlgType name or user_alg."""


@hookspec
def singa_register_updaters(register):
    """Register Updater classes, keyed by UpdaterType name or UpdaterProto.user_type."""


@hookspec
def singa_register_lr_changes(register):
    """Register learning-rate change methods, keyed by ChangeMethod name or user_type."""


@hookspec
def singa_register_param_generators(register):
    """Register ParamGenerator classes, keyed by InitMethod name or ParamGenProto.user_type."""


@hookspec
def singa_register_stores(register):
    """Register Store classes, keyed by StoreProto.backend (e.g. "kvfile", "textfile")."""


@hookspec
def singa_register_engines(register):
    """Register Engine classes: where workers and servers run and how Params move."""


@hookspec
def singa_register_datasets(register):
    """Register dataset converters for ``singa data NAME``."""
