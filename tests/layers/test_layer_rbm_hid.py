"""kRBMHid: hidden probabilities and samples (binary and gaussian) against numpy, the bias
update direction, the zero weight gradient, configuration errors, gradient case."""

import numpy as np
import pytest
from singa_builtins.layers.rbm_hid import RBMHidLayer

from singa_core.errors import SingaError
from singa_core.layer import kNegative, kPositive, kTest, kTrain
from singa_core.testing import GradCase, SourceLayer, layer_conf, make_ctx
from tests.layers.test_layer_rbm_vis import HDIM, VDIM, B, cd_step, make_pair, sig


def test_registered():
    assert RBMHidLayer.type_names == ("kRBMHid",)


@pytest.mark.parametrize("gaussian", [False, True])
def test_probabilities_and_bias_gradient(gaussian):
    x = (np.random.default_rng(5).random((B, VDIM)) > 0.5).astype(np.float32)
    src, vis, hid = make_pair(x, gaussian=gaussian)
    cd_step(src, vis, hid)
    w, bh = vis.weight.value.astype(np.float64), hid.bias.value.astype(np.float64)
    f = (lambda a: a) if gaussian else sig
    h_pos = f(x @ w.T + bh)
    h_neg = f(vis.neg_data.astype(np.float64) @ w.T + bh)  # from probabilities, not samples
    np.testing.assert_allclose(hid.pos_data, h_pos, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(hid.neg_data, h_neg, rtol=1e-5, atol=1e-5)
    hid.weight.grad.fill(np.nan)
    hid.backward(kTrain, [vis])
    np.testing.assert_array_equal(hid.weight.grad, 0)
    np.testing.assert_allclose(hid.bias.grad, (h_neg.sum(0) - h_pos.sum(0)) / B, atol=1e-5)


def test_binary_samples_are_bernoulli_of_the_probabilities():
    n = 4000
    x = np.tile(np.random.default_rng(6).random((1, VDIM)), (n, 1)).astype(np.float32)
    src, vis, hid = make_pair(x, seed=2)
    vis.weight.value *= 0.3
    vis.forward(kPositive, [src, hid])
    hid.forward(kPositive, [vis])
    assert set(np.unique(hid.pos_sample)) <= {0.0, 1.0}
    p = hid.pos_data[0]
    se = np.sqrt(p * (1 - p) / n)
    assert np.all(np.abs(hid.pos_sample.mean(0) - p) < 5 * se + 1e-6)


def test_gaussian_samples_are_probabilities_plus_unit_noise():
    n = 4000
    x = np.tile(np.random.default_rng(7).random((1, VDIM)), (n, 1)).astype(np.float32)
    src, vis, hid = make_pair(x, gaussian=True, seed=3)
    vis.forward(kPositive, [src, hid])
    hid.forward(kPositive, [vis])
    noise = hid.pos_sample - hid.pos_data
    assert np.all(np.abs(noise.mean(0)) < 5 / np.sqrt(n))
    assert np.all(np.abs(noise.std(0) - 1) < 0.06)


def test_sampling_uses_the_layer_rng():
    x = np.random.default_rng(8).random((B, VDIM)).astype(np.float32)
    a, b = make_pair(x, seed=4), make_pair(x, seed=4)
    for src, vis, hid in (a, b):
        cd_step(src, vis, hid, flag=kNegative | kTest)
    np.testing.assert_array_equal(a[2].pos_sample, b[2].pos_sample)
    np.testing.assert_array_equal(a[2].neg_sample, b[2].neg_sample)


def test_a_negative_sample_is_drawn_when_read_with_the_eager_numbers(monkeypatch):
    """CD-1 reads no negative sample and draws none; a later Gibbs step reads it and gets
    the numbers an eager draw at the end of the negative phase would have given."""
    x = np.random.default_rng(8).random((B, VDIM)).astype(np.float32)
    drawn = []  # (layer, whether the draw was a negative sample)
    real = RBMHidLayer.sample

    def sample(self, prob, *rest):
        drawn.append((self, prob is self.neg_data))
        return real(self, prob, *rest)

    monkeypatch.setattr(RBMHidLayer, "sample", sample)
    src, vis, hid = make_pair(x, seed=6)
    eager = make_pair(x, seed=6)

    def negatives(layer):
        return [neg for who, neg in drawn if who is layer]

    cd_step(src, vis, hid)  # CD-1's forward phases: the positive sample only
    assert negatives(hid) == [False]
    cd_step(*eager)
    want = eager[2].neg_sample.copy()  # read at once: drawn now
    vis.forward(kNegative, [src, hid])  # the second Gibbs step reads (draws) it
    assert negatives(hid) == [False, True]
    np.testing.assert_array_equal(hid.neg_sample, want)
    assert set(np.unique(want)) <= {0.0, 1.0}
    # a new positive phase drops an unread negative sample: nothing more is drawn for it
    hid.forward(kNegative, [vis])
    cd_step(src, vis, hid)
    assert negatives(hid) == [False, True, False]


def test_source_must_be_a_visible_layer():
    hid = RBMHidLayer(layer_conf('name: "h" rbm_conf { hdim: 3 } param {} param {}'), make_ctx())
    with pytest.raises(SingaError, match="kRBMVis"):
        hid.setup([SourceLayer(np.zeros((2, 3)))])


def test_missing_hdim_is_a_config_error():
    _, vis, _ = make_pair(np.zeros((B, VDIM), np.float32))
    hid = RBMHidLayer(layer_conf('name: "h" param {} param {}'), make_ctx())
    with pytest.raises(SingaError, match="hdim"):
        hid.setup([vis])


def _case(tmp_path):
    x = (np.random.default_rng(9).random((B, VDIM)) > 0.5).astype(np.float32)
    src, vis, hid = make_pair(x, hdim=HDIM)
    cd_step(src, vis, hid)
    return GradCase(
        hid,
        [vis],
        no_gradient="CD: the update direction is not the gradient of an objective; checked "
        "against the CD formula in test_probabilities_and_bias_gradient",
    )


GRADIENT_CASES = {"kRBMHid": _case}
