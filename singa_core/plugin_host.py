"""Find, load and register plugins.

Plugins are modules named by entry points in the ``singa`` group (built-ins included). They
are loaded one at a time: a plugin that fails to import is recorded (entry point,
distribution, error) and skipped, so everything else keeps working; a job that needs a
type it might have provided names it in its error. Environment switches:

* ``SINGA_DISABLE_PLUGINS=a,b`` skips plugins by entry-point name or distribution name;
* ``SINGA_STRICT_PLUGINS=1`` re-raises a plugin's import error (for plugin authors).

Importing a plugin module also imports its ``_pb2`` modules, which is how a plugin's
proto extensions (``[foo_conf] { ... }`` in job.conf) become known to the config parser.
"""

from __future__ import annotations

import os
import sys
import traceback
from dataclasses import dataclass
from importlib import metadata
from types import ModuleType
from typing import Any

import pluggy

from singa_core import hookspecs
from singa_core.registry import Provider, Registry, make_registries

ENTRY_POINT_GROUP = "singa"


@dataclass(frozen=True)
class PluginFailure:
    plugin: str
    dist: str
    error: str
    detail: str = ""  # full traceback, shown with --verbose


@dataclass
class LoadedPlugin:
    name: str
    provider: Provider
    module: Any


def _env_list(name: str) -> set[str]:
    return {x.strip() for x in os.environ.get(name, "").split(",") if x.strip()}


class PluginHost:
    """Owns the pluggy manager and the registries filled from it."""

    def __init__(self) -> None:
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.registries: dict[str, Registry] = make_registries()
        self.plugins: list[LoadedPlugin] = []
        self.failures: list[PluginFailure] = []
        self._registered_hooks: set[tuple[int, str]] = set()

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
            try:
                module = ep.load()
            except Exception as exc:  # a broken plugin must not take the tool down
                if strict:
                    raise
                self.failures.append(
                    PluginFailure(
                        ep.name,
                        f"{dist} {version}",
                        f"{type(exc).__name__}: {exc}",
                        traceback.format_exc(),
                    )
                )
                continue
            self.add_plugin(module, name=ep.name, provider=Provider(ep.name, dist, version))

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
