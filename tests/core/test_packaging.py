"""The distribution's identity: its name, the import packages it installs, and that every
source package is in the wheel (pyproject lists them explicitly because plugins/ installs as
``singa_builtins``)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

DIST_NAME = "singa-classic"
FOLDER_TO_IMPORT = {"singa_core": "singa_core", "plugins": "singa_builtins"}


def _source_packages() -> set[str]:
    found = set()
    for folder, import_name in FOLDER_TO_IMPORT.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            found.add(".".join((import_name, *rel.parts)))
    return found


def test_distribution_name_is_not_apache_singa():
    # "singa" on the public index is Apache SINGA; plugins depend on this name instead.
    assert PYPROJECT["project"]["name"] == DIST_NAME


def test_every_source_package_is_listed():
    setuptools = PYPROJECT["tool"]["setuptools"]
    # package-dir maps an import name to its source folder
    assert setuptools["package-dir"] == {imp: folder for folder, imp in FOLDER_TO_IMPORT.items()}
    listed = set(setuptools["packages"])
    missing = _source_packages() - listed
    assert not missing, f"add to [tool.setuptools] packages in pyproject.toml: {sorted(missing)}"
    assert not listed - _source_packages(), "pyproject lists packages that do not exist"


def test_the_command_is_still_singa():
    assert PYPROJECT["project"]["scripts"] == {"singa": "singa_core.commands.cli:main"}
    for target in PYPROJECT["project"]["entry-points"]["singa"].values():
        assert target.startswith("singa_builtins."), target


@pytest.mark.slow
def test_wheel_installs_no_top_level_plugins_package(tmp_path):
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(tmp_path),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    (wheel,) = tmp_path.glob("singa_classic-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith(".dist-info")}
    assert top == {"singa_core", "singa_builtins"}, top
    packaged = {str(Path(n).parent).replace("/", ".") for n in names if n.endswith("__init__.py")}
    assert packaged == _source_packages()
    assert "singa_core/schema/job_pb2.pyi" in names


def test_the_ray_extra_brings_what_the_ray_engine_imports():
    # Ray's own wheel does not require grpcio; the engine's cluster check imports it
    # (plugins/engines/ray/auth.py), so the extra must name it: without it every
    # `singa train --engine ray` on a clean `pip install 'singa-classic[ray]'` failed.
    ray_extra = " ".join(PYPROJECT["project"]["optional-dependencies"]["ray"])
    assert "ray" in ray_extra and "grpcio" in ray_extra


def test_the_cluster_check_without_grpcio_names_the_extra(monkeypatch):
    pytest.importorskip("ray", reason="needs the ray extra (Ray's modules are imported)")
    from singa_builtins.engines.ray import auth

    from singa_core.errors import SingaError

    monkeypatch.setitem(sys.modules, "grpc", None)  # import grpc -> ImportError
    with pytest.raises(SingaError) as info:
        auth.ask_gcs("127.0.0.1:1", None, timeout=0.1)
    assert "grpcio" in str(info.value) and "singa-classic[ray]" in info.value.help
