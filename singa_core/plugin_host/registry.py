"""Registries: one per kind of pluggable object, each with its contract.

A :class:`Registry` maps a type name to the object a plugin registered, and remembers which
plugin and distribution provided it. Registries are filled by
:class:`singa_core.plugin_host.host.PluginHost`; nothing in the core names a concrete type.

Two namespaces, as in SINGA 0.3
-------------------------------
A kind whose proto message selects its type with an enum *and* a string (LayerProto's
``type`` / ``user_type``, AlgProto's ``alg`` / ``user_alg``, ...) keeps two namespaces:

* ``enum``: names selected by the enum field (``type: kEmbedding``); only the enum's value
  names can be registered here;
* ``user``: names selected by the string field (``user_type: "kEmbedding"``).

0.3 kept built-in layers in an int-keyed factory and users' layers in a string-keyed one,
so its rnnlm example could register its own ``user_type: "kEmbedding"`` next to the built-in
``kEmbedding``; here too. A plugin chooses with ``register(name, obj, user_type=...)``:
``True`` puts the name in the user namespace, ``False`` in the enum namespace (only a value
name of the kind's enum), and the default (``None``) follows 0.3:

* the core distribution's registrations (:attr:`Registry.core_distribution`, the built-in
  types) of an enum value name go to the enum namespace;
* every other registration goes to the user namespace: a third-party plugin's
  ``register("kEmbedding", MyLayer)`` serves ``user_type: "kEmbedding"`` (0.3's string
  factory), never clashes with the built-in ``type: kEmbedding``, and a plugin registering
  ``"kFoo"`` for ``user_type: "kFoo"`` needs no change. (A third party that implements an
  enum type the core lacks is still found by ``type:``, see below; one that means to take
  the enum name from another plugin says ``user_type=False``.)

A name claimed twice in one namespace by different objects is a conflict: every lookup of
it fails with both providers and a ``help:`` line naming the choice each plugin has
(``user_type=True`` / ``False`` and the field that selects each), and disabling one.

A lookup by a plain ``str`` (``type:``, and the core's own inserted layers) searches the
enum namespace, then the user one; a lookup by a :class:`UserTypeName` (what
:func:`type_selection` returns for a set ``user_type``) searches the user namespace, then
the enum one (a ``user_type`` naming a built-in keeps working, as before). Kinds without
an enum (stores, engines, datasets) have the one namespace ``enum`` keyed by their name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from singa_core.errors import SingaError, did_you_mean
from singa_core.schema import job_pb2

ENUM, USER = "enum", "user"


class UserTypeName(str):
    """A type name written in a ``user_type`` / ``user_alg`` string field: looked up in
    the user namespace first. It is a ``str`` (prints, compares and hashes as one), so it
    passes through every ``get_plugin(kind, name)`` unchanged."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"UserTypeName({str.__repr__(self)})"


def type_selection(msg, enum_field: str, user_field: str) -> str:
    """The registry key a proto message selects: a :class:`UserTypeName` when the string
    field is set, else the enum value's name (a plain ``str``)."""
    if msg.HasField(user_field) and getattr(msg, user_field):
        return UserTypeName(getattr(msg, user_field))
    return (
        msg.DESCRIPTOR.fields_by_name[enum_field]
        .enum_type.values_by_number[getattr(msg, enum_field)]
        .name
    )


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
    namespace: str = ENUM


@dataclass
class Registry:
    """Name -> registered object for one kind, with a documented contract."""

    kind: str  # e.g. "layer"
    hook: str  # hook name that fills it
    contract: str  # what a registered object must be (shown by list-plugins --help)
    check: Callable[[Any], str | None] = lambda obj: None  # returns a problem or None
    #: the proto enum whose value names select types (LayerType), None: one namespace
    enum: Any = None
    enum_field: str = "name"  # how job.conf selects from each namespace, for messages
    user_field: str = ""
    #: the distribution of the built-in types (the host passes singa-classic): its
    #: registrations of an enum value name default to the enum namespace, everybody else's
    #: to the user namespace (see the module doc); "" counts no distribution as the core
    core_distribution: str = ""
    #: the enum namespace (or the only one); kept under this name for old callers
    entries: dict[str, Entry] = field(default_factory=dict)
    user_entries: dict[str, Entry] = field(default_factory=dict)
    #: (namespace, name) -> every entry that claims it, the first loaded first
    conflicts: dict[tuple[str, str], list[Entry]] = field(default_factory=dict)

    def _table(self, namespace: str) -> dict[str, Entry]:
        return self.user_entries if namespace == USER else self.entries

    def field_of(self, namespace: str) -> str:
        """The job.conf field that selects a name of ``namespace`` (``type``, ``user_type``)."""
        return self.user_field if namespace == USER and self.user_field else self.enum_field

    def namespace_for(
        self, name: str, user_type: bool | None, provider: Provider | None = None
    ) -> str:
        """Where ``register(name, ..., user_type=user_type)`` from ``provider`` puts the name."""
        if self.enum is None:
            return ENUM
        enum_names = self.enum.values_by_name
        if user_type is None:
            core = provider is not None and provider.dist == self.core_distribution
            return ENUM if core and name in enum_names else USER
        if not user_type and name not in enum_names:
            raise TypeError(
                f"{self.kind} '{name}' is not a {self.enum.name} value; register it with "
                f'user_type=True (selected by {self.user_field}: "{name}")'
            )
        return USER if user_type else ENUM

    def add(
        self,
        name: str,
        obj: Any,
        provider: Provider,
        alias_of: str | None = None,
        *,
        user_type: bool | None = None,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise TypeError(f"{self.kind} names must be non-empty strings, got {name!r}")
        problem = self.check(obj)
        if problem:
            raise TypeError(f"{self.kind} '{name}': {problem}")
        namespace = self.namespace_for(name, user_type, provider)
        entry = Entry(str(name), obj, provider, alias_of, namespace)
        table = self._table(namespace)
        old = table.get(name)
        if old is not None and old.obj is not obj:
            self.conflicts.setdefault((namespace, name), [old]).append(entry)
            return
        table[name] = entry

    def names(self) -> list[str]:
        """Every registered name, both namespaces."""
        return sorted(set(self.entries) | set(self.user_entries))

    def all_entries(self) -> list[Entry]:
        """Every registration, conflicting ones included (for list-plugins)."""
        out = list(self.entries.values()) + list(self.user_entries.values())
        for claims in self.conflicts.values():
            out += claims[1:]
        return sorted(out, key=lambda e: (e.name, e.namespace, e.provider.dist))

    def _order(self, name: str) -> tuple[str, str]:
        return (USER, ENUM) if isinstance(name, UserTypeName) else (ENUM, USER)

    def entry(self, name: str) -> Entry | None:
        """The entry ``name`` resolves to (see the module doc), None if none or conflicting."""
        for namespace in self._order(name):
            if (namespace, name) in self.conflicts:
                return None
            entry = self._table(namespace).get(name)
            if entry is not None:
                return entry
        return None

    def conflict_for(self, name: str) -> tuple[str, list[Entry]] | None:
        """(namespace, claimants) if ``name`` resolves to a name two plugins claim."""
        for namespace in self._order(name):
            if (namespace, name) in self.conflicts:
                return namespace, self.conflicts[(namespace, name)]
            if name in self._table(namespace):
                return None
        return None

    def conflict_help(self, name: str, claims: list[Entry]) -> str:
        """The ``help:`` of a conflict: the namespace choice each plugin has (for kinds
        selected by an enum and a string field) and disabling one of them."""
        plugins = sorted({e.provider.plugin for e in claims})
        disable = "disable one with " + " or ".join(f"SINGA_DISABLE_PLUGINS={p}" for p in plugins)
        if self.enum is None:
            return f"each {self.kind} name belongs to one plugin: rename one of them, or {disable}"
        user = f'register("{name}", cls, user_type=True) is selected by {self.user_field}: "{name}"'
        if name in self.enum.values_by_name:
            choice = (
                f"{user}, user_type=False by {self.enum_field}: {name} (where a built-in may "
                "already be); one plugin can move to the other field or rename its type"
            )
        else:
            choice = (
                f"{user} (the default); only {self.enum.name} values can be registered with "
                f"user_type=False for {self.enum_field}:, so one plugin must rename its type"
            )
        return f"each field serves a name once: {choice}; or {disable}"

    def get(self, name: str, *, what: str | None = None, failed_plugins=()) -> Any:
        """The object registered as ``name``; a SingaError naming the options otherwise."""
        conflict = self.conflict_for(name)
        if conflict is not None:
            namespace, claims = conflict
            claimants = ", ".join(str(e.provider) for e in claims)
            selected = f"{self.field_of(namespace)} " if self.enum is not None else ""
            raise SingaError(
                f'{self.kind} {selected or "type "}"{name}" is provided by more than one '
                f"plugin: {claimants}",
                help=self.conflict_help(name, claims),
            )
        entry = self.entry(name)
        if entry is not None:
            return entry.obj
        label = what or f"{self.kind} type"
        hint = did_you_mean(name, self.names())
        known = (
            ", ".join(
                f"{e.name} ({e.provider.dist})"
                for e in sorted(
                    list(self.entries.values()) + list(self.user_entries.values()),
                    key=lambda e: (e.name, e.namespace),
                )
            )
            or "none"
        )
        notes = [f"known {self.kind} types: {known}"]
        for failure in failed_plugins:
            what_happened = "is skipped" if getattr(failure, "skipped", False) else "failed to load"
            notes.append(
                f"plugin '{failure.plugin}' from {failure.dist} {what_happened} "
                f'({failure.error}); it may provide "{name}"'
            )
        fixes = [f.help for f in failed_plugins if getattr(f, "help", "")]
        help_ = hint or (
            "; ".join(dict.fromkeys(fixes))  # e.g. generate a plugin's missing _pb2 module
            if fixes
            else "install the plugin that provides it (pip install ...), then check "
            "`singa list-plugins`"
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


def make_registries(core_distribution: str = "") -> dict[str, Registry]:
    """Fresh, empty registries for every kind (keyed by kind); ``core_distribution`` is
    the distribution of the built-in types (:attr:`Registry.core_distribution`)."""
    registries = {
        r.kind: r
        for r in [
            Registry(
                "layer",
                "singa_register_layers",
                "A subclass of singa_core.layer.Layer. Constructed as "
                "cls(conf: LayerProto, ctx: LayerContext); then setup(srcs), forward(phase, srcs), "
                "backward(phase, srcs). Named by LayerProto.type (enum name) or user_type.",
                _subclass_of("singa_core.layer.Layer"),
                enum=job_pb2.LayerType.DESCRIPTOR,
                enum_field="type",
                user_field="user_type",
            ),
            Registry(
                "worker",
                "singa_register_workers",
                "A subclass of singa_core.worker.Worker (a TrainOneBatch algorithm). "
                "Constructed as cls(job: JobProto); train_one_batch(step, net, stub) and "
                "test_one_batch(phase, net). Named by AlgProto.alg (enum name) or user_alg.",
                _subclass_of("singa_core.worker.Worker"),
                enum=job_pb2.AlgType.DESCRIPTOR,
                enum_field="alg",
                user_field="user_alg",
            ),
            Registry(
                "updater",
                "singa_register_updaters",
                "A subclass of singa_core.updater.Updater. Constructed as cls(conf: "
                "UpdaterProto, lr: LRChange); apply(step, value, grad, state, scale, lr_scale, "
                "wd_scale) updates one Param slice in place. Named by UpdaterProto.type or "
                "user_type.",
                _subclass_of("singa_core.updater.Updater"),
                enum=job_pb2.UpdaterType.DESCRIPTOR,
                enum_field="type",
                user_field="user_type",
            ),
            Registry(
                "lr_change",
                "singa_register_lr_changes",
                "A subclass of singa_core.updater.LRChange. Constructed as cls(conf: "
                "LRGenProto); calling it with a training step returns the learning rate. "
                "Named by LRGenProto.type (ChangeMethod name) or user_type.",
                _subclass_of("singa_core.updater.LRChange"),
                enum=job_pb2.ChangeMethod.DESCRIPTOR,
                enum_field="type",
                user_field="user_type",
            ),
            Registry(
                "param_generator",
                "singa_register_param_generators",
                "A subclass of singa_core.param.ParamGenerator. Constructed as cls(conf: "
                "ParamGenProto); fill(value: ndarray, rng) initialises a Param in place. "
                "Named by ParamGenProto.type (InitMethod name) or user_type.",
                _subclass_of("singa_core.param.ParamGenerator"),
                enum=job_pb2.InitMethod.DESCRIPTOR,
                enum_field="type",
                user_field="user_type",
            ),
            Registry(
                "store",
                "singa_register_stores",
                "A subclass of singa_core.store.Store, constructed with no arguments; "
                "open(path, mode), read(), seek_to_first(), write(key, value), flush(), "
                "close(). Named by StoreProto.backend.",
                _subclass_of("singa_core.store.Store"),
                enum_field="backend",
            ),
            Registry(
                "engine",
                "singa_register_engines",
                "A subclass of singa_core.engine.Engine: runs a prepared job (workers, "
                "servers, the training loop). Selected with `singa train --engine NAME`.",
                _subclass_of("singa_core.engine.Engine"),
                enum_field="--engine",
            ),
            Registry(
                "dataset",
                "singa_register_datasets",
                "A subclass of singa_core.dataset.DatasetConverter: `singa data NAME` "
                "converts raw files into SINGA's stores.",
                _subclass_of("singa_core.dataset.DatasetConverter"),
                enum_field="name",
            ),
        ]
    }
    for registry in registries.values():
        registry.core_distribution = core_distribution
    return registries
