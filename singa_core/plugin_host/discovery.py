"""Helper for plugin packages that keep one type per module.

A plugin package's hook can call :func:`register_submodule_types` to register every class
defined in its submodules (and theirs, for a subpackage) that declares ``type_names``
(the first name is the type's canonical name, the others are aliases). Adding a built-in type is
then one module (and its test), with no list to edit.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil


def iter_submodule_types(package: str, base: type):
    """Classes that subclass ``base`` and declare ``type_names``, defined in the modules of
    ``package``, in name order; a subpackage (a type that grew into several modules, such as
    an engine) is searched the same way. Modules whose names start with ``_`` are skipped."""
    pkg = importlib.import_module(package)
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{package}.{info.name}")
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if (
                obj.__module__ == module.__name__
                and issubclass(obj, base)
                and obj.__dict__.get("type_names")
            ):
                yield obj
        if info.ispkg:
            yield from iter_submodule_types(module.__name__, base)


def register_submodule_types(package: str, base: type, register) -> None:
    for cls in iter_submodule_types(package, base):
        first, *aliases = cls.type_names
        register(first, cls, aliases=tuple(aliases))
