"""Plugin discovery: entry points, broken plugins, name conflicts, list-plugins."""

from __future__ import annotations

import json
import textwrap

import pytest
from conftest import run_singa

from singa_core.errors import SingaError
from singa_core.plugin_host import PluginHost

LAYER_PLUGIN = """
from singa_core import hookimpl
from singa_core.layer import NeuronLayer


class Twin(NeuronLayer):
    def setup(self, srcs):
        self.alloc(srcs[0].shape)

    def forward(self, phase, srcs):
        self.data[...] = srcs[0].data


@hookimpl
def singa_register_layers(register):
    register("kTwin", Twin)
"""


def fake_dist(root, dist: str, module: str, source: str, version: str = "0.1") -> None:
    """A minimal installed distribution (dist-info + module) under ``root``."""
    (root / f"{module}.py").write_text(textwrap.dedent(source))
    info = root / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text(f"[singa]\n{module} = {module}\n")


@pytest.fixture
def site(tmp_path, monkeypatch):
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    return root


def test_broken_plugin_is_reported_and_skipped(site):
    fake_dist(site, "singa-broken", "singa_broken_plugin", "raise ImportError('no libfoo')\n")
    host = PluginHost()
    host.load_entry_points()
    (failure,) = [f for f in host.failures if f.plugin == "singa_broken_plugin"]
    assert failure.dist == "singa-broken 0.1" and "no libfoo" in failure.error
    assert "kInnerProduct" in host.registry("layer").names()  # everything else works
    with pytest.raises(SingaError) as info:
        host.get("layer", "kBrokenThing")
    assert any("singa_broken_plugin" in n and "singa-broken 0.1" in n for n in info.value.notes)


def test_strict_mode_reraises(site, monkeypatch):
    fake_dist(site, "singa-broken", "singa_broken_plugin2", "raise ImportError('boom')\n")
    monkeypatch.setenv("SINGA_STRICT_PLUGINS", "1")
    with pytest.raises(ImportError):
        PluginHost().load_entry_points()


def test_two_plugins_claiming_one_name(site):
    fake_dist(site, "singa-twin-a", "singa_twin_a", LAYER_PLUGIN)
    fake_dist(site, "singa-twin-b", "singa_twin_b", LAYER_PLUGIN)
    host = PluginHost()
    host.load_entry_points()
    with pytest.raises(SingaError) as info:
        host.get("layer", "kTwin")
    msg = info.value.message
    assert "singa-twin-a 0.1" in msg and "singa-twin-b 0.1" in msg
    assert info.value.help


def test_disable_plugins(site, monkeypatch):
    fake_dist(site, "singa-twin-a", "singa_twin_a2", LAYER_PLUGIN.replace("kTwin", "kTwinA"))
    monkeypatch.setenv("SINGA_DISABLE_PLUGINS", "singa-twin-a")
    host = PluginHost()
    host.load_entry_points()
    assert "kTwinA" not in host.registry("layer").names()


def test_registration_checks_the_contract(site):
    fake_dist(
        site,
        "singa-bad",
        "singa_bad_contract",
        """
        from singa_core import hookimpl

        @hookimpl
        def singa_register_layers(register):
            register("kNotALayer", object)
        """,
    )
    host = PluginHost()
    host.load_entry_points()
    (f,) = [f for f in host.failures if f.plugin == "singa_bad_contract"]
    assert "subclass of singa_core.layer.Layer" in f.error


def test_list_plugins_table_and_json(site):
    fake_dist(site, "singa-twin-a", "singa_twin_a3", LAYER_PLUGIN)
    fake_dist(site, "singa-broken", "singa_broken_plugin3", "raise RuntimeError('bad')\n")
    env = {"PYTHONPATH": str(site)}
    res = run_singa("list-plugins", env=env)
    assert res.returncode == 0, res.stderr
    assert "singa-classic 0.1.0" in res.stdout
    assert "kInnerProduct" in res.stdout and "kSGD" in res.stdout
    assert "singa-twin-a 0.1" in res.stdout and "kTwin" in res.stdout
    assert "singa_broken_plugin3" in res.stderr and "bad" in res.stderr
    data = json.loads(run_singa("list-plugins", "--json", env=env).stdout)
    by_name = {p["name"]: p for p in data["plugins"]}
    assert "kBP" in by_name["singa-classic"]["types"]["worker"]
    assert by_name["singa-twin-a"]["types"]["layer"] == ["kTwin"]
    assert data["failed"][0]["plugin"] == "singa_broken_plugin3"
