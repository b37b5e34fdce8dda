"""The other acme types with the kit, and what the docs say of them."""

import numpy as np
import pytest
from singa_core.plugin_host.host import get_host
from singa_core.schema import job_pb2
from singa_core.testing import SourceLayer, check_layer, check_updater, layer_conf

from acme.embedding import RnnlmEmbedding
from acme.focal_loss import FocalLossLayer
from acme.prelu import PReLULayer


def test_dense_adds_under_kaggrad():  # the kit's kAggGrad check runs the doc's backward
    x = np.random.default_rng(1).standard_normal((5, 3))
    conf = 'name: "d" user_type: "kDense" innerproduct_conf { num_output: 4 } param { name: "w" }'
    check_layer("kDense", conf, [x], shape=(5, 4))


def test_swish():
    x = np.random.default_rng(2).standard_normal((3, 7))
    check_layer("kSwish", 'name: "s" user_type: "kSwish" [acme.swish_conf] { beta: 1.5 }', [x])


def test_prelu_alpha_defaults_to_init_alpha():
    conf = 'name: "act" user_type: "kPReLU" [acme.prelu_conf] { init_alpha: 0.1 }'
    defaults = PReLULayer(layer_conf(conf)).param_defaults(0, "alpha")
    assert defaults.init.type == job_pb2.kConstant
    assert np.float32(defaults.init.value) == np.float32(0.1)


def test_the_sign_momentum_rule_decays_decoupled():
    check_updater("kSignMomentum", weight_decay="decoupled")


def test_the_focal_loss_predicts_with_a_softmax():
    conf = layer_conf('name: "loss" srclayers: "ip2" srclayers: "data"')
    assert FocalLossLayer.deploy_output(conf).type == job_pb2.kSoftmax


@pytest.mark.parametrize("field", ["user_type", "type"])
def test_two_namespaces(field):
    layers = get_host().registry("layer")
    entry = layers.user_entries if field == "user_type" else layers.entries
    assert (entry["kEmbedding"].obj is RnnlmEmbedding) == (field == "user_type")


def test_the_rnnlm_embedding():
    words = SourceLayer(np.array([[0.0], [2.0], [2.0]]), grad=False)
    conf = 'name: "e" embedding_conf { vocab_size: 4 feature_dim: 3 } param { name: "v" }'
    check_layer(RnnlmEmbedding, conf, [words], shape=(3, 3), strided=False)
