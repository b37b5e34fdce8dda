"""Acceptance: a plugin package that depends on singa-classic installs into a fresh
virtualenv next to this one and works there.

The new venv is made without pip (no network); a ``.pth`` file in it adds this
environment's site-packages, so singa-classic and its dependencies are *installed* as far
as the new venv's pip resolution is concerned. The plugin (a package scaffolded by
``singa new-plugin``) is installed with ``pip --python NEWVENV/bin/python install``
without ``--no-deps`` and with ``--no-index``: its ``singa-classic>=0.1,<1`` requirement must
be met by the distribution already there, never fetched (``singa`` on the public index is
Apache SINGA's). The venv's Python then lists the plugin and trains a job with it.
"""

from __future__ import annotations

import json
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from conftest import run_singa

from singa_core.testing import blobs_csv, mlp_job

pytestmark = pytest.mark.slow


def test_plugin_installs_into_a_fresh_venv_and_works(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    site_dir = Path(
        subprocess.run(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    assert site_dir.is_relative_to(venv)
    outer = [sysconfig.get_paths()["purelib"], *site.getsitepackages()]
    lines = "".join(f"import site; site.addsitedir({d!r})\n" for d in dict.fromkeys(outer))
    (site_dir / "_outer_env.pth").write_text(lines)

    res = run_singa("new-plugin", "fresh-gate", "--kind", "layer", "--out", str(tmp_path))
    assert res.returncode == 0, res.stderr
    project = tmp_path / "singa-fresh-gate"
    pip = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(py),
            "install",
            "--no-index",
            "--no-build-isolation",
            str(project),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert pip.returncode == 0, pip.stdout + pip.stderr
    assert "Requirement already satisfied: singa-classic" in pip.stdout
    installed = sorted(p.name for p in site_dir.iterdir())
    assert "singa_fresh_gate" in installed and "plugins" not in installed

    cli = "import sys; from singa_core.commands.cli import main; sys.argv[0] = 'singa'; main()"
    listed = subprocess.run(
        [str(py), "-c", cli, "list-plugins", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert listed.returncode == 0, listed.stderr
    names = {p["name"] for p in json.loads(listed.stdout)["plugins"]}
    assert {"singa-classic", "singa-fresh-gate"} <= names

    data = blobs_csv(tmp_path / "blobs.csv")
    hidden = 'user_type: "kFreshGate" param { name: "slope" init { type: kConstant value: 0.25 } }'
    (tmp_path / "job.conf").write_text(mlp_job(data, hidden_layer=hidden, steps=40))
    trained = subprocess.run(
        [
            str(py),
            "-c",
            cli,
            "train",
            str(tmp_path / "job.conf"),
            "--workspace",
            str(tmp_path / "ws"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert trained.returncode == 0, trained.stderr
    assert "singa-fresh-gate-0.1.0" in trained.stderr
    train = [
        json.loads(line)
        for line in (tmp_path / "ws" / "metrics.jsonl").read_text().splitlines()
        if '"phase": "train"' in line
    ]
    assert train[-1]["loss"] < 0.5 * train[0]["loss"]
    # and the plugin is not visible to this (outer) environment
    outer_list = run_singa("list-plugins", "--json")
    assert "singa-fresh-gate" not in outer_list.stdout
