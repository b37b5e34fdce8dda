"""Build a third-party plugin distribution in a temp folder and pip-install it for real.

Used by the tests that prove singa's extension points from the outside: the package is
written file by file, its ``.proto`` extensions are compiled with ``singa compile-proto``
(as a plugin author does), and it is installed with pip into a target folder that the
test puts on ``PYTHONPATH`` for the ``singa`` subprocesses.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from conftest import run_singa


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
    """``singa compile-proto`` each of ``protos`` next to itself (``-I`` the project folder)."""
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
