"""The core's import graph: no circle between its modules, and every room imports only the
rooms below it (the order of singa_core/__init__'s docstring).

The graph is read from the installed package's source (every ``import`` statement, those
inside functions included, except under ``if TYPE_CHECKING:``); importing ``a.b.c`` also
imports the packages ``a.b`` on the way, so those are edges too. The front door
``singa_core/__init__`` is left out of those implied edges: every module lies inside it,
it imports only ``contracts.hookspecs`` when loaded, and looks ``Job`` up on first use;
and so is a module's own package (loaded before the module, whatever imported it).
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import singa_core

ROOT = Path(singa_core.__file__).parent

# a room may import rooms of a lower or equal rank; nothing in the core imports testing
RANKS = {
    "contracts": 0,
    "schema": 0,
    "plugin_host": 1,
    "jobconf": 1,
    "netbuilder": 2,
    "running": 3,
    "inference": 4,
    "api": 5,
    "tuning": 6,
    "commands": 7,
    "testing": 8,
}
# the plugin API 1.0 paths are aliases of contracts modules (rank 0)
ALIASES = {
    "errors",
    "hookspecs",
    "layer",
    "param",
    "updater",
    "worker",
    "stub",
    "store",
    "dataset",
    "engine",
    "blas",
    "device",
    "kernels",
    "capture",
    "cuda",
    "sequences",
    "memory",
    "names",
    "resources",
    "jit",
    "numpy_loops",
}


def module_names() -> dict[str, Path]:
    names = {}
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _type_checking_block(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _imports(tree: ast.AST, module: str, is_package: bool):
    stack = [tree]
    while stack:
        node = stack.pop()
        if _type_checking_block(node):
            continue
        stack.extend(ast.iter_child_nodes(node))
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, ()
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".")
                keep = len(parts) - node.level + (1 if is_package else 0)
                base = ".".join(parts[:keep] + ([base] if base else []))
            yield base, tuple(a.name for a in node.names)


def import_graph() -> dict[str, set[str]]:
    names = module_names()
    graph: dict[str, set[str]] = {name: set() for name in names}
    for name, path in names.items():
        tree = ast.parse(path.read_text(), str(path))
        for target, fromlist in _imports(tree, name, path.name == "__init__.py"):
            if not target.startswith("singa_core"):
                continue
            targets = [f"{target}.{item}" for item in fromlist if f"{target}.{item}" in names]
            if target in names and target != name:
                graph[name].add(target)
            for t in targets:
                parts = t.split(".")
                for k in range(2, len(parts) + 1):  # the packages on the way are imported too
                    dep = ".".join(parts[:k])
                    if dep in names and dep != name and not name.startswith(dep + "."):
                        graph[name].add(dep)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                return path[path.index(dep) :] + [dep]
            if dep not in state and (found := visit(dep)):
                return found
        state[node] = 2
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def room_of(module: str) -> str | None:
    parts = module.split(".")
    if len(parts) < 2:
        return None  # singa_core itself: the package front door
    if len(parts) == 2 and parts[1] in ALIASES:
        return "contracts"
    return parts[1] if parts[1] in RANKS else None


def test_the_installed_package_is_the_one_read():
    assert importlib.util.find_spec("singa_core").origin == str(ROOT / "__init__.py")


def test_every_module_belongs_to_a_room():
    loose = [m for m in module_names() if m != "singa_core" and room_of(m) is None]
    assert loose == [], f"modules outside the rooms of singa_core/__init__: {loose}"


def test_no_import_circle_inside_singa_core():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_rooms_import_only_rooms_below_them():
    wrong = []
    for module, deps in import_graph().items():
        room = room_of(module)
        if room is None:
            continue
        for dep in deps:
            dep_room = room_of(dep)
            if dep_room is not None and RANKS[dep_room] > RANKS[room]:
                wrong.append(f"{module} ({room}) imports {dep} ({dep_room})")
    assert wrong == [], "\n".join(sorted(wrong))


def test_the_cycle_finder_finds_a_circle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_each_room_says_what_it_holds_and_what_it_never_imports():
    for room in RANKS:
        doc = importlib.import_module(f"singa_core.{room}").__doc__ or ""
        assert len(doc) > 80, f"singa_core.{room} has no docstring saying what it holds"
        if room not in ("schema", "testing"):
            assert "import" in doc.lower(), (
                f"singa_core.{room}'s docstring does not say what it imports"
            )
