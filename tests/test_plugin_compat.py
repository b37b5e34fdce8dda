"""Plugins that cannot live together are skipped with a clear warning, never a traceback:
two real pip-installed packages extending LayerProto with the same field number, and
packages built for another plugin API (by their dependency on singa-classic, or by a
``SINGA_PLUGIN_API`` module attribute). Every other job keeps running."""

from __future__ import annotations

import json

import pytest
from conftest import mlp_conf, run_singa, write_csv_blobs
from plugin_package import install_plugin_package, pyproject

from singa_core import PLUGIN_API_VERSION
from singa_core.running import checkpoint as ck

# kScaleA / kScaleB: y = scale * x, scale from the package's own LayerProto extension; both
# packages took field number 1077 (a clash on purpose).
PROTO = """
syntax = "proto2";
package singa_clash{n};
import "singa_core/schema/job.proto";
message Scale{N}Proto {{ optional float scale = 1 [default = 1]; }}
extend singa.LayerProto {{ optional Scale{N}Proto scale{n}_conf = 1077; }}
"""

PLUGIN = """
from singa_core import hookimpl
from singa_core.layer import NeuronLayer
from singa_clash{n} import clash{n}_pb2


class Scale{N}(NeuronLayer):
    def setup(self, srcs):
        self.scale = self.conf.Extensions[clash{n}_pb2.scale{n}_conf].scale
        self.alloc(srcs[0].shape)

    def forward(self, phase, srcs):
        self.data[...] = self.scale * srcs[0].data

    def backward(self, phase, srcs):
        g = srcs[0].grad_for(self)
        if g is not None:
            g[...] = self.scale * self.grad


@hookimpl
def singa_register_layers(register):
    register("kScale{N}", Scale{N})
"""

# a plugin whose only type is a layer that works; what makes it unloadable is its metadata
API_PLUGIN = """
from singa_core import hookimpl
from singa_core.layer import NeuronLayer
{attribute}

class Same(NeuronLayer):
    def setup(self, srcs):
        self.alloc(srcs[0].shape)

    def forward(self, phase, srcs):
        self.data[...] = srcs[0].data


@hookimpl
def singa_register_layers(register):
    register("{type_name}", Same)
"""


def _package(n: str) -> dict[str, str]:
    fill = {"n": n, "N": n.upper()}
    return {
        "pyproject.toml": pyproject(f"singa-clash-{n}", f"singa_clash{n}", f"clash{n}"),
        f"singa_clash{n}/__init__.py": "",
        f"singa_clash{n}/clash{n}.proto": PROTO.format(**fill),
        f"singa_clash{n}/plugin.py": PLUGIN.format(**fill),
    }


def _api_package(name: str, requires: str, attribute: str, type_name: str) -> dict[str, str]:
    module = name.replace("-", "_")
    return {
        "pyproject.toml": pyproject(name, module, module).replace(
            "singa-classic>=0.1,<1", f"singa-classic{requires}"
        ),
        f"{module}/__init__.py": "",
        f"{module}/plugin.py": API_PLUGIN.format(attribute=attribute, type_name=type_name),
    }


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("compat")
    for n in ("a", "b"):
        install_plugin_package(root, f"singa-clash-{n}", _package(n))
    install_plugin_package(  # needs a singa-classic that does not exist yet
        root, "singa-future-dep", _api_package("singa-future-dep", ">=2,<3", "", "kFutureDep")
    )
    install_plugin_package(  # declares the plugin API it was built for
        root,
        "singa-future-api",
        _api_package("singa-future-api", ">=0.1", 'SINGA_PLUGIN_API = ">=2,<3"', "kFutureApi"),
    )
    return install_plugin_package(  # built for this API: loads
        root,
        "singa-current-api",
        _api_package("singa-current-api", ">=0.1,<1", 'SINGA_PLUGIN_API = ">=1,<2"', "kCurrent"),
    )


def _job(tmp_path, extra_layer: str = ""):
    """(job.conf, workspace): conftest's small MLP, with ``extra_layer`` (named "extra")
    between tanh and ip2 if given."""
    data = write_csv_blobs(tmp_path / "blobs.csv")
    ws = tmp_path / "ws"
    text = mlp_conf(data, ws, steps=4, checkpoint_freq=4)
    if extra_layer:
        tanh = 'layer { name: "tanh" type: kSTanh srclayers: "ip1" }'
        ip2 = 'name: "ip2" type: kInnerProduct srclayers: "tanh"'
        assert tanh in text and ip2 in text
        text = text.replace(tanh, f"{tanh}\n  {extra_layer}")
        text = text.replace(ip2, ip2.replace('"tanh"', '"extra"'))
    conf = tmp_path / "job.conf"
    conf.write_text(text)
    return conf, ws


CLASH_WARNING = (
    "warning: plugin 'clashb' from singa-clash-b 0.1.0 is skipped: its proto extension "
    "[singa_clashb.scaleb_conf] (singa_clashb/clashb.proto) uses field number 1077 of "
    "singa.LayerProto, which singa-clash-a 0.1.0 already uses for [singa_clasha.scalea_conf]"
)


@pytest.mark.slow
def test_a_job_without_plugin_types_runs_and_warns_about_the_clash(site, tmp_path):
    conf, ws = _job(tmp_path)
    res = run_singa("train", str(conf), "--seed", "1", env={"PYTHONPATH": str(site)})
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    assert CLASH_WARNING in res.stderr, res.stderr
    assert "another field number" in res.stderr and "SINGA_DISABLE_PLUGINS" in res.stderr
    assert (ws / "checkpoint" / "step4-worker0").exists()


def test_the_first_plugin_of_the_clash_works(site, tmp_path):
    layer = 'layer { name: "extra" type: kUserLayer user_type: "kScaleA" srclayers: "tanh" '
    layer += "[scalea_conf] { scale: 0.5 } }"
    conf, ws = _job(tmp_path, layer)
    res = run_singa("train", str(conf), "--seed", "1", env={"PYTHONPATH": str(site)})
    assert res.returncode == 0, res.stderr
    assert "singa-clash-a-0.1.0" in res.stderr and "singa-clash-b-0.1.0" not in res.stderr
    assert ck.read_params(ws / "checkpoint" / "step4-worker0")


def test_using_the_skipped_plugin_names_why(site, tmp_path):
    layer = 'layer { name: "extra" user_type: "kScaleB" srclayers: "tanh" }'
    conf, _ = _job(tmp_path, layer)
    res = run_singa("train", str(conf), env={"PYTHONPATH": str(site)})
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr
    assert 'unknown layer type "kScaleB"' in res.stderr
    assert "plugin 'clashb' from singa-clash-b 0.1.0 is skipped (its proto extension" in res.stderr


def test_plugins_built_for_another_api_are_skipped(site, tmp_path):
    env = {"PYTHONPATH": str(site)}
    conf, _ = _job(tmp_path)
    res = run_singa("train", str(conf), "--seed", "1", env=env)
    assert res.returncode == 0, res.stderr
    assert (
        "warning: plugin 'singa_future_dep' from singa-future-dep 0.1.0 is skipped: built for "
        "another plugin API: it needs singa-classic <3,>=2, this is singa-classic 0.1.0"
    ) in res.stderr, res.stderr
    assert (
        "warning: plugin 'singa_future_api' from singa-future-api 0.1.0 is skipped: built for "
        f"another plugin API: it needs the singa plugin API >=2,<3, this is the singa plugin "
        f"API {PLUGIN_API_VERSION}"
    ) in res.stderr, res.stderr
    # a job naming a skipped plugin's type says why it is missing, located, no traceback
    layer = 'layer { name: "extra" user_type: "kFutureApi" srclayers: "tanh" }'
    (tmp_path / "uses").mkdir()
    conf, _ = _job(tmp_path / "uses", layer)
    res = run_singa("train", str(conf), env=env)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert 'unknown layer type "kFutureApi"' in res.stderr
    assert "singa-future-api 0.1.0 is skipped (built for another plugin API" in res.stderr


def test_list_plugins_shows_api_ranges_and_skipped_plugins(site):
    env = {"PYTHONPATH": str(site)}
    res = run_singa("list-plugins", env=env)
    assert res.returncode == 0, res.stderr
    assert f"plugin API {PLUGIN_API_VERSION} (singa-classic 0.1.0)" in res.stdout
    lines = res.stdout.splitlines()
    current = next(ln for ln in lines if ln.startswith("  singa-current-api 0.1.0"))
    assert "singa-classic<1,>=0.1" in current and "SINGA_PLUGIN_API >=1,<2" in current
    assert "compatible" in current
    assert "skipped: plugin 'clashb' from singa-clash-b 0.1.0" in res.stderr
    data = json.loads(run_singa("list-plugins", "--json", env=env).stdout)
    assert data["core"] == {
        "distribution": "singa-classic",
        "version": "0.1.0",
        "plugin_api": PLUGIN_API_VERSION,
    }
    by_name = {p["name"]: p for p in data["plugins"]}
    assert by_name["singa-current-api"]["requires"] == "<1,>=0.1"
    assert by_name["singa-current-api"]["plugin_api"] == ">=1,<2"
    assert "singa-clash-b" not in by_name and "singa-future-api" not in by_name
    skipped = {f["dist"]: f for f in data["failed"]}
    assert skipped["singa-clash-b 0.1.0"]["skipped"] is True
    assert "field number 1077" in skipped["singa-clash-b 0.1.0"]["error"]
    assert skipped["singa-future-dep 0.1.0"]["help"]


def test_same_extension_number_on_different_messages_is_no_clash():
    """The check is per (message, number): a package's UpdaterProto 101 and another's
    AlgProto 101 (tests/test_extension_points.py uses 101 on four messages) coexist."""
    from google.protobuf import descriptor_pb2

    from singa_core.plugin_host.host import PluginHost, ProtoExtension, _extensions_of

    fdp = descriptor_pb2.FileDescriptorProto(name="x.proto", package="px")
    fdp.extension.add(name="u", number=101, extendee=".singa.UpdaterProto")
    nested = fdp.message_type.add(name="Holder")
    nested.extension.add(name="a", number=101, extendee=".singa.AlgProto")
    exts = sorted(_extensions_of(fdp), key=lambda e: e.name)
    assert exts == [
        ProtoExtension("singa.AlgProto", 101, "px.Holder.a", "x.proto"),
        ProtoExtension("singa.UpdaterProto", 101, "px.u", "x.proto"),
    ]
    host = PluginHost()
    host.extension_owners[("singa.AlgProto", 7)] = ("other 1.0", exts[0])
    assert host._extension_owner(exts[1], "mine 1.0") is None
    clash = ProtoExtension("singa.AlgProto", 7, "py.b", "y.proto")
    assert host._extension_owner(clash, "mine 1.0") == ("other 1.0", "px.Holder.a")
