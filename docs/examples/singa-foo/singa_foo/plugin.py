"""The entry point: registers the four types from their hooks."""

from singa_core import hookimpl

from singa_foo.init import RampInit
from singa_foo.lr import WarmupCosineLR
from singa_foo.updater import SignumUpdater
from singa_foo.worker import FooWorker

SINGA_PLUGIN_API = ">=1,<2"  # checked against PLUGIN_API_VERSION before the hooks register


@hookimpl
def singa_register_workers(register):
    register("kFooAlg", FooWorker)


@hookimpl
def singa_register_updaters(register):
    register("kFooUpdater", SignumUpdater)


@hookimpl
def singa_register_lr_changes(register):
    register("kFooLR", WarmupCosineLR)


@hookimpl
def singa_register_param_generators(register):
    register("kFooInit", RampInit)
