"""Refusals say what to use instead (issue 31): a training job without a deploy net names
the job.conf beside it that has one (char-rnn: sample.conf; the RBM stack:
autoencoder.conf), before any checkpoint is sought; a layer without an ONNX export is
named by the type job.conf selects it by and points at the hook and the section that
documents it; the layer scaffold writes a working to_onnx."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import REPO, run_singa

from singa_core.errors import SingaError
from singa_core.layer import NeuronLayer
from singa_core.testing import SourceLayer, build


@pytest.mark.parametrize(
    ("conf", "instead"),
    [
        ("examples/char-rnn/job.conf", "examples/char-rnn/sample.conf"),
        ("examples/rbm/rbm2.conf", "examples/rbm/autoencoder.conf"),
    ],
)
def test_a_job_without_a_deploy_net_names_the_one_beside_it(conf, instead, tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((1, 784), np.float32))
    for args in (
        ("predict", conf, str(tmp_path / "x.npy")),
        ("export", conf, "--out", str(tmp_path / "m.onnx")),
    ):
        res = run_singa(*args, cwd=REPO)
        assert res.returncode == 2, res.stdout + res.stderr
        assert "has no deploy behaviour" in res.stderr  # not "no trained model"
        help_line = res.stderr.strip().splitlines()[-1]
        assert help_line.startswith("help:") and f"{instead} beside it deploys" in help_line
        assert "Traceback" not in res.stderr


class NoExport(NeuronLayer):
    def setup(self, srcs):
        self.alloc(srcs[0].shape)

    def forward(self, phase, srcs):
        self.data[...] = srcs[0].data


def test_a_layer_without_to_onnx_is_named_by_its_job_conf_type():
    pytest.importorskip("onnx")
    from singa_core.inference.onnx_export import OnnxGraph, _export_layer

    src = SourceLayer(np.zeros((2, 3), np.float32))
    layer = build(NoExport, 'name: "act" user_type: "kScaledTanh"', [src])
    with pytest.raises(SingaError) as info:
        _export_layer(layer, OnnxGraph(), ["input"])
    err = info.value
    assert "layer 'act' (kScaledTanh) has no ONNX export" in err.message
    assert f"{__name__}.NoExport" in err.help and "to_onnx(g, inputs)" in err.help
    section = "'The deploy net and exporting a layer'"
    assert section in err.help
    assert "### The deploy net and exporting a layer" in (REPO / "CONTRIBUTING.md").read_text()
