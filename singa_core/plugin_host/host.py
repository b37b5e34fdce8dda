"""Find, load and register plugins.

Plugins are modules named by entry points in the ``singa`` group (built-ins included). They
are loaded one at a time: a plugin that fails to import is recorded (entry point,
distribution, error) and skipped, so everything else keeps working; a job that needs a
type it might have provided names it in its error. Environment switches:

* ``SINGA_DISABLE_PLUGINS=a,b`` skips plugins by entry-point name or distribution name;
* ``SINGA_STRICT_PLUGINS=1`` re-raises a plugin's import error (for plugin authors).

Importing a plugin module also imports its ``_pb2`` modules, which is how a plugin's
proto extensions (``[foo_conf] { ... }`` in job.conf) become known to the config parser.

Before a plugin is imported, two checks can skip it with a warning (a
:class:`PluginFailure` with ``skipped=True`` and a ``help`` line), so that a job never stops
half-way on an incompatible or clashing plugin:

* **plugin API.** The core implements :data:`singa_core.PLUGIN_API_VERSION`. A plugin
  declares what it was built for by its distribution's dependency on ``singa-classic``
  (checked against the installed version, before import) and/or a module attribute
  ``SINGA_PLUGIN_API = ">=1,<2"`` (checked against the API version, after import and
  before its hooks are registered);
* **proto extension numbers.** The extensions a distribution's ``_pb2`` modules declare are
  read from their serialized descriptors without importing them; one whose (message, field
  number) is already taken by another distribution's extension would make protobuf refuse
  the file, so the later plugin is skipped and the warning names both distributions, the
  message, the number and what to change.
"""

from __future__ import annotations

import ast
import os
import re
import sys
import traceback
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any

import pluggy
from google.protobuf import descriptor_pb2, descriptor_pool
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from singa_core.contracts import hookspecs
from singa_core.contracts.version import CORE_DISTRIBUTION, PLUGIN_API_VERSION, __version__
from singa_core.plugin_host.registry import Provider, Registry, make_registries

ENTRY_POINT_GROUP = "singa"


@dataclass(frozen=True)
class PluginFailure:
    """A plugin that failed to load, or was skipped on purpose (``skipped``)."""

    plugin: str
    dist: str
    error: str
    detail: str = ""  # full traceback, shown with --verbose
    help: str = ""  # what to change, for skipped plugins
    skipped: bool = False  # not loaded on purpose (incompatible API, clashing extension)

    def warning(self) -> str:
        """The warning the CLI prints (one line, plus a help line if there is one)."""
        what = "is skipped" if self.skipped else "failed to load"
        text = f"warning: plugin '{self.plugin}' from {self.dist} {what}: {self.error}"
        return text + (f"\nhelp: {self.help}" if self.help else "")


@dataclass
class LoadedPlugin:
    name: str
    provider: Provider
    module: Any
    #: the distribution's requirement on singa-classic (e.g. ">=0.1,<1"), "" if none
    requires_core: str = ""
    #: the module's SINGA_PLUGIN_API (e.g. ">=1,<2"), "" if it declares none
    plugin_api: str = ""


@dataclass(frozen=True)
class ProtoExtension:
    """A proto extension field a distribution declares (read from its ``_pb2`` modules)."""

    extendee: str  # full name of the extended message, e.g. "singa.LayerProto"
    number: int
    name: str  # full name of the extension, e.g. "singa_foo.foo_conf"
    file: str  # the .proto file that declares it

    @property
    def short_name(self) -> str:
        return self.name.rsplit(".", 1)[-1]


def _serialized_descriptors(source: str) -> list[bytes]:
    """The serialized FileDescriptorProtos a protoc-generated ``_pb2.py`` adds to the pool
    (the bytes literal of its ``AddSerializedFile(b'...')`` call), without running it."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    out = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "AddSerializedFile"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, bytes)
        ):
            out.append(node.args[0].value)
    return out


def _extensions_of(fdp: descriptor_pb2.FileDescriptorProto) -> list[ProtoExtension]:
    prefix = f"{fdp.package}." if fdp.package else ""
    found = [(prefix, ext) for ext in fdp.extension]
    stack = [(prefix + m.name + ".", m) for m in fdp.message_type]
    while stack:  # extensions declared inside messages
        scope, msg = stack.pop()
        found += [(scope, ext) for ext in msg.extension]
        stack += [(scope + m.name + ".", m) for m in msg.nested_type]
    return [
        ProtoExtension(ext.extendee.lstrip("."), int(ext.number), scope + ext.name, fdp.name)
        for scope, ext in found
    ]


def distribution_extensions(dist: metadata.Distribution) -> list[ProtoExtension]:
    """The proto extensions declared by the ``_pb2`` modules ``dist`` installs (from its
    RECORD; an editable install lists none)."""
    out: list[ProtoExtension] = []
    for rel in dist.files or ():
        if not str(rel).endswith("_pb2.py"):
            continue
        try:
            source = Path(dist.locate_file(rel)).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        for blob in _serialized_descriptors(source):
            try:
                out += _extensions_of(descriptor_pb2.FileDescriptorProto.FromString(blob))
            except Exception:  # not a descriptor after all: protobuf will say so on import
                continue
    return out


def core_requirement(dist: metadata.Distribution) -> str:
    """The version specifier of ``dist``'s dependency on singa-classic ("" if none)."""
    for text in dist.requires or ():
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        if req.name.lower().replace("_", "-") == CORE_DISTRIBUTION and req.marker is None:
            return str(req.specifier)
    return ""


def api_problem(declared: str, *, of: str, version: str) -> str | None:
    """Why ``version`` does not satisfy the range ``declared`` (None if it does)."""
    if not declared:
        return None
    try:
        ok = SpecifierSet(declared).contains(Version(version), prereleases=True)
    except (InvalidSpecifier, ValueError):
        return f"its declared range {declared!r} for {of} is not a version range"
    return None if ok else f"it needs {of} {declared}, this is {of} {version}"


def missing_pb2_name(exc: BaseException) -> str | None:
    """The dotted name of the generated ``_pb2`` module whose absence ``exc`` reports
    (``from pkg import foo_pb2`` or ``import pkg.foo_pb2``), None for any other error."""
    if not isinstance(exc, ImportError):
        return None
    name, name_from = exc.name or "", getattr(exc, "name_from", None) or ""
    if name_from.endswith("_pb2"):
        return f"{name}.{name_from}" if name else name_from
    if name.endswith("_pb2"):
        return name
    match = re.search(r"cannot import name '(\w+_pb2)' from '([\w.]+)'", str(exc))
    return f"{match[2]}.{match[1]}" if match else None


def missing_pb2_help(exc: BaseException) -> str:
    """How to produce the generated module a plugin failed to import ("" if ``exc`` is not
    about a missing ``_pb2``): compile its .proto with ``singa compile-proto``."""
    module = missing_pb2_name(exc)
    if module is None:
        return ""
    package, _, stem = module.rpartition(".")
    proto = f"{package.replace('.', '/')}/{stem[: -len('_pb2')]}.proto".lstrip("/")
    return (
        f"the generated module {module} is missing: in the plugin's project folder run "
        f"`singa compile-proto {proto} --out . -I .` and reinstall the plugin "
        f"(`pip install .`); compile-proto needs protoc (`pip install "
        f"'{CORE_DISTRIBUTION}[proto]'`), which is only needed after editing the .proto: "
        "`singa new-plugin` writes the module itself"
    )


def _env_list(name: str) -> set[str]:
    return {x.strip() for x in os.environ.get(name, "").split(",") if x.strip()}


class PluginHost:
    """Owns the pluggy manager and the registries filled from it."""

    def __init__(self) -> None:
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.registries: dict[str, Registry] = make_registries(CORE_DISTRIBUTION)
        self.plugins: list[LoadedPlugin] = []
        self.failures: list[PluginFailure] = []
        self._registered_hooks: set[tuple[int, str]] = set()
        #: (extended message, field number) -> (distribution "name version", extension)
        self.extension_owners: dict[tuple[str, int], tuple[str, ProtoExtension]] = {}
        self._dist_extensions: dict[str, list[ProtoExtension]] = {}

    # -- loading ---------------------------------------------------------------------
    def load_entry_points(self) -> None:
        disabled = _env_list("SINGA_DISABLE_PLUGINS")
        strict = os.environ.get("SINGA_STRICT_PLUGINS", "") not in ("", "0")
        seen: set[tuple[str, str]] = set()
        for ep in sorted(
            metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: (e.value, e.name)
        ):
            dist = ep.dist.name if ep.dist is not None else "<unknown>"
            version = ep.dist.version if ep.dist is not None else "?"
            if (ep.name, ep.value) in seen:  # the same dist visible twice on sys.path
                continue
            seen.add((ep.name, ep.value))
            if ep.name in disabled or dist in disabled:
                continue
            requires = core_requirement(ep.dist) if ep.dist is not None else ""
            skip = self._check_before_import(ep, dist, version, requires)
            if skip is not None:
                self.failures.append(skip)
                continue
            try:
                module = ep.load()
            except Exception as exc:  # a broken plugin must not take the tool down
                if strict:
                    raise
                clash = "duplicate extension entry" in str(exc)  # not seen before import
                self.failures.append(
                    PluginFailure(
                        ep.name,
                        f"{dist} {version}",
                        f"{type(exc).__name__}: {exc}",
                        traceback.format_exc(),
                        help="its proto extension takes a (message, field number) another "
                        "plugin's extension uses; one of them must change its number"
                        if clash
                        else missing_pb2_help(exc),
                    )
                )
                continue
            declared = getattr(module, "SINGA_PLUGIN_API", "")
            declared = declared if isinstance(declared, str) else repr(declared)
            problem = api_problem(declared, of="the singa plugin API", version=PLUGIN_API_VERSION)
            if problem:
                self.failures.append(
                    PluginFailure(
                        ep.name,
                        f"{dist} {version}",
                        f"built for another plugin API: {problem} "
                        f"(SINGA_PLUGIN_API in {module.__name__})",
                        help=f"install a release of {dist} built for plugin API "
                        f"{PLUGIN_API_VERSION}, or a singa-classic whose API it supports",
                        skipped=True,
                    )
                )
                continue
            self.add_plugin(module, name=ep.name, provider=Provider(ep.name, dist, version))
            if self.plugins and self.plugins[-1].module is module:
                self.plugins[-1].requires_core = requires
                self.plugins[-1].plugin_api = declared

    def _check_before_import(
        self, ep: metadata.EntryPoint, dist: str, version: str, requires: str
    ) -> PluginFailure | None:
        """A skipped-plugin record if ``ep`` must not be imported: it needs another
        singa-classic, or its proto extensions take a number another plugin uses."""
        who = f"{dist} {version}"
        if dist != CORE_DISTRIBUTION:
            problem = api_problem(requires, of=CORE_DISTRIBUTION, version=__version__)
            if problem:
                return PluginFailure(
                    ep.name,
                    who,
                    f"built for another plugin API: {problem} (plugin API {PLUGIN_API_VERSION})",
                    help=f"install a release of {dist} that supports {CORE_DISTRIBUTION} "
                    f"{__version__}, or the {CORE_DISTRIBUTION} it was built for",
                    skipped=True,
                )
        if ep.dist is None:
            return None
        if dist not in self._dist_extensions:
            self._dist_extensions[dist] = distribution_extensions(ep.dist)
        exts = self._dist_extensions[dist]
        for ext in exts:
            clash = self._extension_owner(ext, who)
            if clash is not None:
                owner, theirs = clash
                return PluginFailure(
                    ep.name,
                    who,
                    f"its proto extension [{ext.name}] ({ext.file}) uses field number "
                    f"{ext.number} of {ext.extendee}, which {owner} already uses for "
                    f"[{theirs}]; protobuf cannot load both, so {dist} is skipped",
                    help=f"one of the two must declare its extension of {ext.extendee} with "
                    f"another field number (a plugin author picks one from the message's "
                    f"range, see CONTRIBUTING: proto extension numbers); until then uninstall "
                    f"one of them, or choose with SINGA_DISABLE_PLUGINS=<distribution>",
                    skipped=True,
                )
        for ext in exts:
            self.extension_owners.setdefault((ext.extendee, ext.number), (who, ext))
        return None

    def _extension_owner(self, ext: ProtoExtension, who: str) -> tuple[str, str] | None:
        """(owner, extension name) if another distribution (or a module already imported)
        has taken ``ext``'s (message, number)."""
        owner = self.extension_owners.get((ext.extendee, ext.number))
        if owner is not None:
            if owner[0] != who and owner[1].name != ext.name:
                return owner[0], owner[1].name
            return None
        pool = descriptor_pool.Default()
        try:
            taken = pool.FindExtensionByNumber(pool.FindMessageTypeByName(ext.extendee), ext.number)
        except KeyError:
            return None
        if taken.full_name == ext.name:
            return None
        return f"an imported module ({taken.file.name})", taken.full_name

    def add_plugin(self, module: ModuleType | Any, *, name: str, provider: Provider) -> None:
        """Register one plugin object (module or instance) and its types."""
        if self.pm.is_registered(module):
            return
        try:
            self.pm.register(module, name=name)
        except Exception as exc:
            self.failures.append(
                PluginFailure(name, f"{provider.dist} {provider.version}", str(exc))
            )
            return
        self.plugins.append(LoadedPlugin(name, provider, module))
        self._collect(module, provider)

    def _collect(self, module: Any, provider: Provider) -> None:
        for registry in self.registries.values():
            hook = getattr(self.pm.hook, registry.hook)
            for impl in hook.get_hookimpls():
                if impl.plugin is not module:
                    continue

                def register(
                    name: str, obj: Any, aliases=(), *, user_type=None, _r=registry
                ) -> None:
                    _r.add(name, obj, provider, user_type=user_type)
                    for alias in aliases:
                        _r.add(alias, obj, provider, alias_of=name, user_type=user_type)

                try:
                    impl.function(register=register)
                except Exception as exc:
                    if os.environ.get("SINGA_STRICT_PLUGINS", "") not in ("", "0"):
                        raise
                    self.failures.append(
                        PluginFailure(
                            provider.plugin,
                            f"{provider.dist} {provider.version}",
                            f"{registry.hook} raised {type(exc).__name__}: {exc}",
                            traceback.format_exc(),
                        )
                    )

    # -- lookup ----------------------------------------------------------------------
    def registry(self, kind: str) -> Registry:
        return self.registries[kind]

    def get(self, kind: str, name: str, *, what: str | None = None) -> Any:
        return self.registries[kind].get(name, what=what, failed_plugins=self.failures)

    def conflicts(self) -> list[tuple[str, str, str, list[Provider]]]:
        """(kind, namespace, name, providers) of every name two plugins claim."""
        out = []
        for kind, reg in self.registries.items():
            for (namespace, name), entries in sorted(reg.conflicts.items()):
                out.append((kind, namespace, name, [e.provider for e in entries]))
        return out

    def distributions(self) -> list[tuple[str, str]]:
        """(dist, version) of every loaded plugin, for logs and checkpoints."""
        return sorted({(p.provider.dist, p.provider.version) for p in self.plugins})


_default_host: PluginHost | None = None


def get_host() -> PluginHost:
    """The process-wide host with every installed plugin loaded (lazily, once)."""
    global _default_host
    if _default_host is None:
        host = PluginHost()
        host.load_entry_points()
        _default_host = host
    return _default_host


def reset_host() -> None:
    """Forget the loaded plugins (tests that install plugins call this)."""
    global _default_host
    _default_host = None
    metadata_cache_clear = getattr(metadata, "_cache_clear", None)
    if metadata_cache_clear:
        metadata_cache_clear()
    sys.path_importer_cache.clear()
