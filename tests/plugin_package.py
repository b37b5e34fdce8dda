"""Build a third-party plugin distribution in a temp folder and pip-install it for real.

Used by the tests that prove singa's extension points from the outside: the package is
written file by file, its ``.proto`` extensions are compiled with ``singa compile-proto``
(as a plugin author does), and it is installed with pip into a target folder that the
test puts on ``PYTHONPATH`` for the ``singa`` subprocesses.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from conftest import need_extra, run_singa
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]


def pyproject(project: str, package: str, entry_point: str) -> str:
    """A pyproject.toml for ``project`` shipping the Python package ``package``, whose
    ``package.plugin`` module is the ``singa`` entry point named ``entry_point``."""
    return f"""
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "{project}"
version = "0.1.0"
dependencies = ["singa-classic>=0.1,<1"]

[project.entry-points.singa]
{entry_point} = "{package}.plugin"

[tool.setuptools]
packages = ["{package}"]
"""


def install_plugin_package(root: Path, project: str, files: dict[str, str]) -> Path:
    """Write ``root/project`` from ``files`` (relative path -> text, dedented; must include
    ``pyproject.toml``), compile every ``.proto`` in it next to itself (``-I`` the project
    folder), pip-install the project into ``root/site`` and return that folder."""
    assert "pyproject.toml" in files, "a plugin distribution needs a pyproject.toml"
    pkg = root / project
    for rel, text in files.items():
        path = pkg / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    compile_protos(pkg, [pkg / rel for rel in files if rel.endswith(".proto")])
    return pip_install_target(pkg, root / "site")


def install_package_dir(src: Path, root: Path) -> Path:
    """Copy the plugin distribution in folder ``src`` (without build leftovers or compiled
    ``_pb2.py`` files) to ``root``, compile its ``.proto`` files as its author does,
    pip-install it into ``root/site`` and return that folder."""
    pkg = root / src.name
    ignore = shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "*_pb2.py")
    shutil.copytree(src, pkg, ignore=ignore)
    compile_protos(pkg, sorted(pkg.rglob("*.proto")))
    return pip_install_target(pkg, root / "site")


def compile_protos(pkg: Path, protos: list[Path]) -> None:
    """``singa compile-proto`` each of ``protos`` next to itself (``-I`` the project folder);
    skips the test, naming the 'proto' extra, where protoc (grpcio-tools) is missing."""
    if protos:
        need_extra("grpc_tools")
    for proto in protos:
        res = run_singa("compile-proto", str(proto), "--out", str(pkg), "-I", str(pkg))
        assert res.returncode == 0, res.stdout + res.stderr
        generated = proto.with_name(proto.stem + "_pb2.py")
        assert generated.exists(), f"compile-proto did not write {generated}"


def pip_install_target(pkg: Path, site: Path) -> Path:
    """pip-install the project folder ``pkg`` into ``site`` (``--target``); returns site."""
    pip_install_into(site, pkg)
    return site


def pip_install_into(site: Path, *projects: Path) -> None:
    """pip-install project folders into ``site`` (``--target``; no dependencies, no build
    isolation: the test environment already has them)."""
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
         "--no-build-isolation", "--target", str(site), *map(str, projects)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert pip.returncode == 0, pip.stdout + pip.stderr


# -- a fresh virtualenv with only `pip install singa-classic` --------------------------------


@dataclass(frozen=True)
class PlainVenv:
    """A virtualenv holding singa-classic (installed from the checkout, not editable) and
    only what installing it brings: no extras, so no protoc (grpcio-tools)."""

    root: Path
    site: Path  # its site-packages

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    def env(self) -> dict[str, str]:
        """os.environ for its commands: its bin first, nothing of this environment."""
        drop = ("PYTHONPATH", "VIRTUAL_ENV", "SINGA_DISABLE_PLUGINS")  # the outer env's plugins
        env = {k: v for k, v in os.environ.items() if k not in drop}
        env["PATH"] = f"{self.root / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        return {**env, "VIRTUAL_ENV": str(self.root), "OPENBLAS_NUM_THREADS": "1"}

    def run(self, *args: str, cwd: Path | None = None, timeout: int = 600, env=None):
        """Run a command of the venv (``singa ...``, ``python ...``, ``pytest ...``);
        ``env``: variables to add to :meth:`env`."""
        cmd = [str(self.root / "bin" / args[0]), *args[1:]]
        return subprocess.run(
            cmd, cwd=cwd, env={**self.env(), **(env or {})}, capture_output=True, text=True,
            timeout=timeout,
        )  # fmt: skip

    def pip_install(self, *args: str, cwd: Path | None = None):
        """``pip install ARGS`` into the venv, offline: this environment's pip (the venv has
        none) with ``--python``, ``--no-index`` (every requirement must already be there)
        and ``--no-build-isolation`` (setuptools is in the venv), as a user's ``pip
        install`` resolves against what is installed."""
        return subprocess.run(
            [sys.executable, "-m", "pip", "--python", str(self.python), "install",
             "--no-index", "--no-build-isolation", *args],
            cwd=cwd, env=self.env(), capture_output=True, text=True, timeout=600,
        )  # fmt: skip


def _closure(requirements: list[str]) -> list[metadata.Distribution]:
    """The installed distributions ``requirements`` need here, recursively (markers
    evaluated, extras only where a requirement names them)."""
    found: dict[str, metadata.Distribution] = {}
    todo = [(text, "") for text in requirements]
    while todo:
        text, extra = todo.pop()
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate({"extra": extra}):
            continue
        key = canonicalize_name(req.name)
        if key in found and not req.extras:
            continue
        dist = found.setdefault(key, metadata.distribution(req.name))
        for wanted in ("", *sorted(req.extras)):
            todo += [(r, wanted) for r in dist.requires or ()]
    return list(found.values())


def _link_distribution(dist: metadata.Distribution, site: Path) -> None:
    """Make ``dist`` (installed here) installed in ``site``: a link per top-level entry of
    its RECORD (packages, modules, its .dist-info); inside a namespace package shared with
    other distributions (``google/``), a link per entry of its own; a link per file for
    what it installs outside site-packages (the venv's ``lib/``, ``bin/``…)."""
    entries = set()
    for f in dist.files or ():
        parts = Path(str(f)).parts
        if parts[0] == "..":  # outside site-packages (MKL's lib/*.so): a link per file
            source, target = Path(dist.locate_file(f)), site.joinpath(*parts).resolve()
            if source.is_file() and not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                target.symlink_to(source)
            continue
        if parts[0] == "__pycache__":
            continue
        top = Path(dist.locate_file(parts[0]))
        namespace = top.is_dir() and len(parts) > 2 and not (top / "__init__.py").exists()
        entries.add(parts[:2] if namespace else parts[:1])
    for parts in sorted(entries):
        source, target = Path(dist.locate_file(Path(*parts))), site.joinpath(*parts)
        if source.exists() and not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(source)


def linked_venv(root: Path, requirements: list[str]) -> PlainVenv:
    """A new virtualenv in ``root`` (no pip) holding singa-classic's runtime dependencies
    and everything ``requirements`` need, linked from this environment (never downloaded);
    singa-classic itself is not installed yet."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    site = Path(
        subprocess.run(
            [str(root / "bin" / "python"), "-c",
             "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
    )  # fmt: skip
    core = metadata.distribution("singa-classic")
    runtime = [r for r in core.requires or () if "extra ==" not in r]
    for dist in _closure(runtime + list(requirements)):
        _link_distribution(dist, site)
    return PlainVenv(root, site)


def plain_venv(root: Path, *, also: tuple[str, ...] = ("setuptools", "pytest")) -> PlainVenv:
    """A new virtualenv in ``root`` where singa-classic is installed as a user's plain ``pip
    install singa-classic`` installs it: its runtime dependencies (this environment's copies,
    linked in: the tests never use the network), then singa-classic built from a copy of the
    checkout (a wheel, not editable), resolved by pip against what is there. ``also`` are
    installed the same way beforehand: the build backend (``--no-build-isolation``) and
    pytest (what a plugin's ``[test]`` extra would fetch); grpcio-tools is never among them.
    """
    venv = linked_venv(root, list(also))
    source = root.parent / "singa-classic-src"  # a copy: the build never writes in the checkout
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    for folder in ("singa_core", "plugins", "proto"):
        shutil.copytree(REPO / folder, source / folder, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    pip = venv.pip_install(str(source))
    assert pip.returncode == 0, pip.stdout + pip.stderr
    probe = venv.run("python", "-c", "import grpc_tools")
    assert probe.returncode != 0, "grpcio-tools must not be importable in the plain venv"
    return venv
