"""Layers declare default Param initialisers (``Layer.param_defaults``), proven with a real
layer in a pip-installed plugin: ``kPReLU`` (y = max(x, 0) + alpha * min(x, 0), one alpha per
channel on axis 1) whose ``alpha`` starts at ``[singa_prelu.prelu_conf] { init_alpha }``
when the user's ``param { }`` entry gives no ``init`` — or when there is no entry at all."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import mlp_conf, run_singa, write_csv_blobs
from plugin_package import install_plugin_package, pyproject

from singa_core.running import checkpoint as ck

PROTO = """
syntax = "proto2";
package singa_prelu;
import "singa_core/schema/job.proto";

message PReLUProto {
  optional float init_alpha = 1 [default = 0.25];
}

extend singa.LayerProto { optional PReLUProto prelu_conf = 1042; }
"""

PLUGIN = '''
"""kPReLU: y = max(x, 0) + alpha * min(x, 0); alpha has one value per channel (axis 1)."""
import numpy as np

from singa_core import hookimpl
from singa_core.layer import NeuronLayer, kAggGrad
from singa_core.schema import job_pb2
from singa_prelu import prelu_pb2


class PReLU(NeuronLayer):
    def param_defaults(self, index, role):
        alpha = self.conf.Extensions[prelu_pb2.prelu_conf].init_alpha
        init = job_pb2.ParamGenProto(type=job_pb2.kConstant, value=alpha)
        return job_pb2.ParamProto(init=init)

    def setup(self, srcs):
        self.expect_srcs(srcs)
        self.alloc_like(srcs[0].data)
        self.alpha = self.create_param(0, (srcs[0].data.shape[1],), "alpha")

    def _alpha(self, ndim):
        return self.alpha.value.reshape((1, -1) + (1,) * (ndim - 2))

    def forward(self, phase, srcs):
        x = srcs[0].data
        np.maximum(x, 0, out=self.data)
        self.data += self._alpha(x.ndim) * np.minimum(x, 0)

    def backward(self, phase, srcs):
        x, g = srcs[0].data, self.grad
        axes = tuple(a for a in range(x.ndim) if a != 1)
        d_alpha = (g * np.minimum(x, 0)).sum(axis=axes)
        if phase & kAggGrad:
            self.alpha.grad += d_alpha
        else:
            self.alpha.grad[...] = d_alpha
        gx = srcs[0].grad_for(self)
        if gx is not None:
            gx[...] = np.where(x > 0, g, self._alpha(x.ndim) * g)


@hookimpl
def singa_register_layers(register):
    register("kPReLU", PReLU)
'''


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    return install_plugin_package(
        tmp_path_factory.mktemp("prelu"),
        "singa-prelu",
        {
            "pyproject.toml": pyproject("singa-prelu", "singa_prelu", "prelu"),
            "singa_prelu/__init__.py": "",
            "singa_prelu/prelu.proto": PROTO,
            "singa_prelu/plugin.py": PLUGIN,
        },
    )


GRADIENT_CHECK = """
import numpy as np
from singa_core.testing import check_layer

rng = np.random.default_rng(0)
x = rng.normal(size=(4, 3, 5)).astype(np.float32)
x[np.abs(x) < 0.05] = 0.5  # keep clear of the kink for central differences
report = check_layer("kPReLU", 'name: "p" user_type: "kPReLU"', [x], shape=(4, 3, 5))
(alpha,) = report.layer.params
assert alpha.shape == (3,) and alpha.name == "p/alpha", (alpha.shape, alpha.name)
print("ok")
"""


def test_prelu_gradients_with_the_kit(site):
    """The test plugin's layer is checked as every layer is (central differences on plain and
    strided sources, kAggGrad, determinism); it needs no param entry to be built."""
    res = subprocess.run(
        [sys.executable, "-c", GRADIENT_CHECK],
        env={**os.environ, "PYTHONPATH": str(site)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stdout + res.stderr


LAYERS = """
layer { name: "act1" user_type: "kPReLU" srclayers: "ip1"
        [singa_prelu.prelu_conf] { init_alpha: 0.25 } }
layer { name: "act2" user_type: "kPReLU" srclayers: "act1"
        param { name: "a2" init { type: kConstant value: 0.5 } } }
layer { name: "act3" user_type: "kPReLU" srclayers: "act2"
        [prelu_conf] { init_alpha: 0.125 }
        param { name: "a3" lr_scale: 0 wd_scale: 0 } }
"""


def test_default_initialiser_fills_what_the_user_left_out(site, tmp_path):
    data = write_csv_blobs(tmp_path / "blobs.csv")
    ws = tmp_path / "ws"
    text = mlp_conf(data, ws, steps=3, checkpoint_freq=1)
    tanh = 'layer { name: "tanh" type: kSTanh srclayers: "ip1" }'
    assert tanh in text
    text = text.replace(tanh, LAYERS).replace('srclayers: "tanh"', 'srclayers: "act3"')
    conf = tmp_path / "job.conf"
    conf.write_text(text)
    res = run_singa("train", str(conf), "--seed", "2", env={"PYTHONPATH": str(site)})
    assert res.returncode == 0, res.stdout + res.stderr

    def params(step):
        return {r.name: r.value for r in ck.read_params(ws / "checkpoint" / f"step{step}-worker0")}

    start, end = params(0), params(3)
    # no param entry: the layer's default, named after the layer
    np.testing.assert_array_equal(start["0#act1/alpha"], np.full(16, 0.25, np.float32))
    # the user's init wins over the default (init_alpha left at its default 0.25)
    np.testing.assert_array_equal(start["0#a2"], np.full(16, 0.5, np.float32))
    # an entry without init: the default init, the user's name and scales
    np.testing.assert_array_equal(start["0#a3"], np.full(16, 0.125, np.float32))
    np.testing.assert_array_equal(end["0#a3"], start["0#a3"])  # lr_scale 0
    assert not np.array_equal(end["0#act1/alpha"], start["0#act1/alpha"])  # trained


def test_a_layer_without_defaults_still_needs_its_param_entry(tmp_path):
    """Built-in layers declare no defaults: kInnerProduct without param entries is still a
    located error naming what to add."""
    data = write_csv_blobs(tmp_path / "blobs.csv")
    text = mlp_conf(data, tmp_path / "ws", steps=2)
    for line in (
        '    param { name: "w1" init { type: kUniform low: -0.3 high: 0.3 } }\n',
        '    param { name: "b1" init { type: kConstant value: 0 } }\n',
    ):
        assert line in text
        text = text.replace(line, "")
    conf = tmp_path / "job.conf"
    conf.write_text(text)
    res = run_singa("train", str(conf))
    assert res.returncode == 2, res.stdout + res.stderr
    assert "layer 'ip1' needs a param entry for its weight" in res.stderr
    assert "help:" in res.stderr and "Traceback" not in res.stderr
