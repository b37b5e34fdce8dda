"""Registries: one per kind of pluggable object, each with its contract.

A :class:`Registry` maps a type name (SINGA 0.3's enum spelling such as ``kInnerProduct``,
or a third party's ``user_type`` string) to the object a plugin registered, and remembers
which plugin and distribution provided it. Registries are filled by
:class:`singa_core.plugin_host.PluginHost`; nothing in the core names a concrete type.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from singa_core.errors import SingaError, did_you_mean


@dataclass(frozen=True)
class Provider:
    """Who provided a registered type: the plugin (entry point) and its distribution."""

    plugin: str
    dist: str
    version: str

    def __str__(self) -> str:
        return f"{self.dist} {self.version} (plugin '{self.plugin}')"


@dataclass
class Entry:
    name: str
    obj: Any
    provider: Provider
    alias_of: str | None = None


@dataclass
class Registry:
    """Name -> registered object for one kind, with a documented contract."""

    kind: str  # e.g. "layer"
    hook: str  # hook name that fills it
    contract: str  # what a registered object must be (shown by list-plugins --help)
    check: Callable[[Any], str | None] = lambda obj: None  # returns a problem or None
    entries: dict[str, Entry] = field(default_factory=dict)
    conflicts: dict[str, list[Entry]] = field(default_factory=dict)

    def add(self, name: str, obj: Any, provider: Provider, alias_of: str | None = None) -> None:
        if not isinstance(name, str) or not name:
            raise TypeError(f"{self.kind} names must be non-empty strings, got {name!r}")
        problem = self.check(obj)
        if problem:
            raise TypeError(f"{self.kind} '{name}': {problem}")
        entry = Entry(name, obj, provider, alias_of)
        old = self.entries.get(name)
        if old is not None and old.obj is not obj:
            self.conflicts.setdefault(name, [old]).append(entry)
            return
        self.entries[name] = entry

    def names(self) -> list[str]:
        return sorted(self.entries)

    def get(self, name: str, *, what: str | None = None, failed_plugins=()) -> Any:
        """The object registered as ``name``; a SingaError naming the options otherwise."""
        if name in self.conflicts:
            claimants = ", ".join(str(e.provider) for e in self.conflicts[name])
            raise SingaError(
                f'{self.kind} type "{name}" is provided by more than one plugin: {claimants}',
                help="uninstall one of them, or disable one with SINGA_DISABLE_PLUGINS=<plugin>",
            )
        entry = self.entries.get(name)
        if entry is not None:
            return entry.obj
        label = what or f"{self.kind} type"
        hint = did_you_mean(name, self.entries)
        known = ", ".join(f"{n} ({self.entries[n].provider.dist})" for n in self.names()) or "none"
        notes = [f"known {self.kind} types: {known}"]
        for failure in failed_plugins:
            notes.append(
                f"plugin '{failure.plugin}' from {failure.dist} failed to load "
                f'({failure.error}); it may provide "{name}"'
            )
        help_ = hint or (
            "install the plugin that provides it (pip install ...), then check `singa list-plugins`"
        )
        raise SingaError(f'unknown {label} "{name}"', help=help_, notes=notes)


def _subclass_of(base_path: str) -> Callable[[Any], str | None]:
    def check(obj: Any) -> str | None:
        module, _, name = base_path.rpartition(".")
        import importlib

        base = getattr(importlib.import_module(module), name)
        if not (isinstance(obj, type) and issubclass(obj, base)):
            return f"must be a subclass of {base_path}, got {obj!r}"
        return None

    return check


def _callable(obj: Any) -> str | None:
    return None if callable(obj) else f"must be callable, got {obj!r}"


def make_registries() -> dict[str, Registry]:
    """Fresh, empty registries for every kind (keyed by kind)."""
    return {
        r.kind: r
        for r in [
            Registry(
                "layer",
                "singa_register_layers",
                "A subclass of singa_core.layer.Layer. Constructed as cls(conf: LayerProto, "
                "ctx: LayerContext); then setup(srcs), forward(phase, srcs), "
                "backward(phase, srcs). Named by LayerProto.type (enum name) or user_type.",
                _subclass_of("singa_core.layer.Layer"),
            ),
            Registry(
                "worker",
                "singa_register_workers",
                "A subclass of singa_core.worker.Worker (a TrainOneBatch algorithm). "
                "Constructed as cls(job: JobProto); train_one_batch(step, net, stub) and "
                "test_one_batch(phase, net). Named by AlgProto.alg (enum name) or user_alg.",
                _subclass_of("singa_core.worker.Worker"),
            ),
            Registry(
                "updater",
                "singa_register_updaters",
                "A subclass of singa_core.updater.Updater. Constructed as cls(conf: "
                "UpdaterProto, lr: LRChange); apply(step, value, grad, state, scale, lr_scale, "
                "wd_scale) updates one Param slice in place. Named by UpdaterProto.type or "
                "user_type.",
                _subclass_of("singa_core.updater.Updater"),
            ),
            Registry(
                "lr_change",
                "singa_register_lr_changes",
                "A subclass of singa_core.updater.LRChange. Constructed as cls(conf: "
                "LRGenProto); calling it with a training step returns the learning rate. "
                "Named by LRGenProto.type (ChangeMethod name) or user_type.",
                _subclass_of("singa_core.updater.LRChange"),
            ),
            Registry(
                "param_generator",
                "singa_register_param_generators",
                "A subclass of singa_core.param.ParamGenerator. Constructed as cls(conf: "
                "ParamGenProto); fill(value: ndarray, rng) initialises a Param in place. "
                "Named by ParamGenProto.type (InitMethod name) or user_type.",
                _subclass_of("singa_core.param.ParamGenerator"),
            ),
            Registry(
                "store",
                "singa_register_stores",
                "A subclass of singa_core.store.Store, constructed with no arguments; "
                "open(path, mode), read(), seek_to_first(), write(key, value), flush(), "
                "close(). Named by StoreProto.backend.",
                _subclass_of("singa_core.store.Store"),
            ),
            Registry(
                "engine",
                "singa_register_engines",
                "A subclass of singa_core.engine.Engine: runs a prepared job (workers, "
                "servers, the training loop). Selected with `singa train --engine NAME`.",
                _subclass_of("singa_core.engine.Engine"),
            ),
            Registry(
                "dataset",
                "singa_register_datasets",
                "A subclass of singa_core.dataset.DatasetConverter: `singa data NAME` "
                "converts raw files into SINGA's stores.",
                _subclass_of("singa_core.dataset.DatasetConverter"),
            ),
        ]
    }
