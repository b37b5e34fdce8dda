"""A third-party plugin, pip-installed for real: a layer with its own proto extension."""

from __future__ import annotations

import json

import pytest
from conftest import mlp_conf, run_singa, write_csv_blobs
from plugin_package import install_plugin_package, pyproject

PROTO = """
syntax = "proto2";
package singa_scale;
import "singa_core/schema/job.proto";

message ScaleProto {
  optional float alpha = 1 [default = 1];
}

extend singa.LayerProto {
  optional ScaleProto scale_conf = 1001;
}
"""

PLUGIN = '''
"""kScale: y = alpha * x, configured by its own [scale_conf] proto extension."""
import numpy as np

from singa_core import hookimpl
from singa_core.layer import NeuronLayer
from singa_scale import scale_pb2


class ScaleLayer(NeuronLayer):
    def setup(self, srcs):
        self.expect_srcs(srcs)
        self.alpha = np.float32(self.conf.Extensions[scale_pb2.scale_conf].alpha)
        self.alloc(srcs[0].shape)

    def forward(self, phase, srcs):
        np.multiply(srcs[0].data, self.alpha, out=self.data)

    def backward(self, phase, srcs):
        g = srcs[0].grad_for(self)
        if g is not None:
            np.multiply(self.grad, self.alpha, out=g)


@hookimpl
def singa_register_layers(register):
    register("kScale", ScaleLayer)
'''

PYPROJECT = pyproject("singa-scale-layer", "singa_scale", "scale")

SCALE_LAYER = """
  layer {
    name: "scaled" user_type: "kScale" srclayers: "tanh"
    [scale_conf] { alpha: 0.5 }
  }
"""


@pytest.fixture(scope="module")
def installed_plugin(tmp_path_factory):
    """Build the package in a temp dir and pip-install it into a target folder."""
    return install_plugin_package(
        tmp_path_factory.mktemp("plugin"),
        "singa-scale-layer",
        {
            "pyproject.toml": PYPROJECT,
            "singa_scale/__init__.py": "",
            "singa_scale/plugin.py": PLUGIN,
            # the plugin author compiles the extension with `singa compile-proto`
            "singa_scale/scale.proto": PROTO,
        },
    )


def job_with_scale(tmp_path):
    data = write_csv_blobs(tmp_path / "d.csv")
    text = mlp_conf(data, tmp_path / "ws", steps=80)
    text = text.replace('srclayers: "tanh"', 'srclayers: "scaled"') + ""
    text = text.replace('  layer {\n    name: "ip2"', SCALE_LAYER + '  layer {\n    name: "ip2"')
    assert "kScale" in text
    path = tmp_path / "job.conf"
    path.write_text(text)
    return path


def test_list_plugins_shows_it(installed_plugin):
    env = {"PYTHONPATH": str(installed_plugin)}
    res = run_singa("list-plugins", env=env)
    assert res.returncode == 0, res.stderr
    assert "singa-scale-layer 0.1.0" in res.stdout and "kScale" in res.stdout
    data = json.loads(run_singa("list-plugins", "--json", env=env).stdout)
    plug = {p["name"]: p for p in data["plugins"]}["singa-scale-layer"]
    assert plug["version"] == "0.1.0" and plug["types"] == {"layer": ["kScale"]}


def test_job_uses_the_installed_layer(installed_plugin, tmp_path):
    path = job_with_scale(tmp_path)
    env = {"PYTHONPATH": str(installed_plugin)}
    dry = run_singa("train", "--dry-run", str(path), env=env)
    assert dry.returncode == 0, dry.stderr
    assert "scaled" in dry.stdout and "kScale" in dry.stdout
    res = run_singa("train", str(path), "--seed", "3", env=env)
    assert res.returncode == 0, res.stderr
    assert "singa-scale-layer-0.1.0" in res.stderr  # the header names the plugins used
    last_test = [ln for ln in res.stdout.splitlines() if ln.startswith("Test step-")][-1]
    acc = float(last_test.split("accuracy = ")[1].split(",")[0])
    assert acc > 0.9, res.stdout


def test_without_the_plugin_the_extension_is_a_clear_error(tmp_path):
    path = job_with_scale(tmp_path)
    res = run_singa("train", str(path))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert 'unknown extension field "[scale_conf]"' in res.stderr
    assert "help:" in res.stderr
