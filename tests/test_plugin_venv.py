"""Acceptance: on a plain install of singa-classic in a fresh virtualenv (no extras, so no
protoc), a plugin package scaffolded there installs with the command `singa new-plugin`
printed and works.

The venv (tests/plugin_package.plain_venv) gets singa-classic's runtime dependencies from
this environment (linked, never downloaded) and singa-classic itself built from a copy of
the checkout. The plugin is installed with ``pip --python VENV/bin/python install
--no-index`` and without ``--no-deps``: its ``singa-classic>=0.1,<1`` requirement must be
met by the distribution already there, never fetched (``singa`` on the public index is
Apache SINGA's). The venv then lists the plugin and trains a job with it.
"""

from __future__ import annotations

import json
import shlex

import pytest
from conftest import run_singa
from plugin_package import plain_venv

from singa_core.testing import blobs_csv, mlp_job

pytestmark = pytest.mark.slow


def test_plugin_installs_into_a_fresh_venv_and_works(tmp_path):
    venv = plain_venv(tmp_path / "venv")
    installed = sorted(p.name for p in venv.site.iterdir())
    assert "singa_core" in installed and "grpc_tools" not in installed

    work = tmp_path / "work"
    work.mkdir()
    res = venv.run("singa", "new-plugin", "fresh-gate", "--kind", "layer", cwd=work)
    assert res.returncode == 0 and res.stderr == "", res.stdout + res.stderr
    project = work / "singa-fresh-gate"
    assert (project / "singa_fresh_gate" / "fresh_gate_pb2.py").is_file()
    install = res.stdout.split("next:\n", 1)[1].splitlines()[0].strip()
    assert install == "pip install ./singa-fresh-gate"  # a folder, not a name on the index
    pip = venv.pip_install(*shlex.split(install)[2:], cwd=work)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    assert "Requirement already satisfied: singa-classic" in pip.stdout
    installed = sorted(p.name for p in venv.site.iterdir())
    assert "singa_fresh_gate" in installed and "plugins" not in installed

    listed = venv.run("singa", "list-plugins", "--json")
    assert listed.returncode == 0, listed.stderr
    names = {p["name"] for p in json.loads(listed.stdout)["plugins"]}
    assert {"singa-classic", "singa-fresh-gate"} <= names

    data = blobs_csv(tmp_path / "blobs.csv")
    hidden = 'user_type: "kFreshGate" param { name: "slope" init { type: kConstant value: 0.25 } }'
    (tmp_path / "job.conf").write_text(mlp_job(data, hidden_layer=hidden, steps=40))
    trained = venv.run("singa", "train", str(tmp_path / "job.conf"), "--workspace",
                       str(tmp_path / "ws"))  # fmt: skip
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
