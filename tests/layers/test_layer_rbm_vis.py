"""kRBMVis: positive/negative phases and the CD update direction against numpy, the
reconstruction-error metric, Gibbs-step sample choice, configuration errors, gradient case."""

import numpy as np
import pytest
from singa_builtins.layers.rbm_hid import RBMHidLayer
from singa_builtins.layers.rbm_vis import RBMVisLayer

from singa_core.errors import SingaError
from singa_core.layer import kNegative, kPositive, kTest, kTrain
from singa_core.testing import GradCase, SourceLayer, layer_conf, make_ctx

VDIM, HDIM, B = 6, 4, 5


def make_pair(x, hdim=HDIM, gaussian=False, seed=0):
    """(input source, vis, hid) set up like a net would, hid's weight sharing vis's."""
    src = SourceLayer(x, name="data")
    vis = RBMVisLayer(
        layer_conf(f'name: "vis" rbm_conf {{ hdim: {hdim} }} param {{ name: "w" }} param {{ }}'),
        make_ctx(seed),
    )
    vis.setup([src, None])
    hid = RBMHidLayer(
        layer_conf(
            f'name: "hid" rbm_conf {{ hdim: {hdim} gaussian: {str(gaussian).lower()} }} '
            'param { name: "w_" share_from: "w" } param { }'
        ),
        make_ctx(seed + 1),
    )
    hid.setup([vis])
    rng = np.random.default_rng(seed + 2)
    dev = vis.device  # the device in effect (the registry test also runs on the stand-in)
    vis.weight.value[...] = dev.asarray(rng.standard_normal(vis.weight.shape), np.float32)
    hid.weight.share_data_from(vis.weight)
    vis.bias.value[...] = dev.asarray(rng.standard_normal(vis.bias.shape), np.float32)
    hid.bias.value[...] = dev.asarray(rng.standard_normal(hdim), np.float32)
    return src, vis, hid


def sig(x):
    return 1 / (1 + np.exp(-x))


def cd_step(src, vis, hid, flag=kNegative | kTest):
    vis.forward(kPositive, [src, hid])
    hid.forward(kPositive, [vis])
    vis.forward(flag, [src, hid])
    hid.forward(kNegative, [vis])


def test_registered_and_ordered_by_first_source():
    assert RBMVisLayer.type_names == ("kRBMVis",)
    assert RBMVisLayer.order_after_first_src_only


def test_phases_and_gradients_match_numpy():
    x = (np.random.default_rng(3).random((B, VDIM)) > 0.5).astype(np.float32)
    src, vis, hid = make_pair(x)
    cd_step(src, vis, hid)
    w, bv, bh = (np.float64(0) + a for a in (vis.weight.value, vis.bias.value, hid.bias.value))
    np.testing.assert_array_equal(vis.pos_data, x)
    v_neg = sig(hid.pos_sample @ w + bv)
    np.testing.assert_allclose(vis.neg_data, v_neg, rtol=1e-5, atol=1e-6)
    h_pos, h_neg = sig(x @ w.T + bh), sig(v_neg @ w.T + bh)
    np.testing.assert_allclose(hid.pos_data, h_pos, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(hid.neg_data, h_neg, rtol=1e-5, atol=1e-5)
    err = np.sum((x - v_neg) ** 2) / B
    assert vis.pop_metrics() == pytest.approx({"Squared Error": err}, rel=1e-5)

    vis.backward(kTrain, [src, hid])
    hid.backward(kTrain, [vis])
    gw = (h_neg.T @ v_neg - h_pos.T @ x) / B
    np.testing.assert_allclose(vis.weight.grad, gw, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(vis.bias.grad, (v_neg.sum(0) - x.sum(0)) / B, rtol=1e-4, atol=1e-6)


def test_a_mostly_zero_input_takes_the_sparse_products_with_the_same_results(monkeypatch):
    """MNIST-like input (20% nonzero): on the host the positive phase and the input's half
    of the weight gradient run over its nonzeros (_sparse_rows), giving numpy's values."""
    pytest.importorskip("numba")
    from singa_builtins.layers import _sparse_rows

    if _sparse_rows._COMPILED.get() is None:
        pytest.skip("the compiled products are off here (SINGA_NUMBA=0)")
    monkeypatch.setattr(_sparse_rows, "MIN_WORK", 0)  # this test's tiny shapes too
    monkeypatch.setattr(_sparse_rows, "max_density", lambda rows_in_place=False: 0.35)
    taken = []

    def spy(name):
        real = getattr(_sparse_rows, name)

        def run(*args):
            taken.append((name, real(*args)))
            return taken[-1][1]

        return run

    for name in ("times_wt", "ht_times"):
        monkeypatch.setattr(_sparse_rows, name, spy(name))
    import singa_builtins.layers.rbm_vis as rbm_vis

    monkeypatch.setattr(rbm_vis, "ht_times", _sparse_rows.ht_times)
    rng = np.random.default_rng(8)
    bigger_v, bigger_h, batch = 40, 24, 10
    x = (rng.random((batch, bigger_v)) > 0.8).astype(np.float32)
    x[1] = 0.0
    src, vis, hid = make_pair(x, hdim=bigger_h)
    if not vis.device.is_host:
        pytest.skip("the sparse products are the host's")
    cd_step(src, vis, hid)
    vis.backward(kTrain, [src, hid])
    assert taken == [("times_wt", True), ("ht_times", True)]
    w, bv, bh = (np.float64(0) + a for a in (vis.weight.value, vis.bias.value, hid.bias.value))
    h_pos = sig(x @ w.T + bh)
    np.testing.assert_allclose(hid.pos_data, h_pos, rtol=1e-5, atol=1e-6)
    v_neg = sig(hid.pos_sample @ w + bv)
    h_neg = sig(v_neg @ w.T + bh)
    gw = (h_neg.T @ v_neg - h_pos.T @ x) / batch
    np.testing.assert_allclose(vis.weight.grad, gw, rtol=1e-4, atol=1e-5)
    gb = (v_neg.sum(0) - x.sum(0)) / batch
    np.testing.assert_allclose(vis.bias.grad, gb, rtol=1e-4, atol=1e-6)


def test_no_error_metric_without_ktest():
    x = np.random.default_rng(0).random((B, VDIM)).astype(np.float32)
    src, vis, hid = make_pair(x)
    cd_step(src, vis, hid, flag=kNegative)
    assert vis.pop_metrics() == {}


def test_later_gibbs_steps_use_the_negative_sample():
    x = np.random.default_rng(1).random((B, VDIM)).astype(np.float32)
    src, vis, hid = make_pair(x)
    cd_step(src, vis, hid)
    vis.forward(kNegative, [src, hid])
    want = sig(hid.neg_sample.astype(np.float64) @ vis.weight.value + vis.bias.value)
    np.testing.assert_allclose(vis.neg_data, want, rtol=1e-5, atol=1e-6)
    # a new positive phase restarts the chain from the positive sample
    cd_step(src, vis, hid)
    want = sig(hid.pos_sample.astype(np.float64) @ vis.weight.value + vis.bias.value)
    np.testing.assert_allclose(vis.neg_data, want, rtol=1e-5, atol=1e-6)


def test_input_is_flattened():
    x = np.random.default_rng(2).random((B, 2, 3)).astype(np.float32)
    src, vis, hid = make_pair(x.reshape(B, VDIM))
    src3 = SourceLayer(x, name="data")
    vis3 = RBMVisLayer(layer_conf('name: "v" rbm_conf { hdim: 4 } param {} param {}'), make_ctx())
    vis3.setup([src3, None])
    assert vis3.weight.shape == (4, VDIM) and vis3.bias.shape == (VDIM,)
    vis3.forward(kPositive, [src3, hid])
    np.testing.assert_array_equal(vis3.pos_data, x.reshape(B, VDIM))


def test_hidden_layer_links_itself_when_vis_lists_only_its_input():
    x = np.random.default_rng(5).random((B, VDIM)).astype(np.float32)
    src, vis, hid = make_pair(x)
    vis.hid_layer = None
    hid.setup([vis])
    assert vis.hid_layer is hid
    vis.forward(kPositive, [src])
    hid.forward(kPositive, [vis])
    vis.forward(kNegative, [src])
    want = sig(hid.pos_sample.astype(np.float64) @ vis.weight.value + vis.bias.value)
    np.testing.assert_allclose(vis.neg_data, want, rtol=1e-5, atol=1e-6)
    vis.backward(kTrain, [src])


def test_without_a_hidden_layer_negative_phase_is_an_error():
    src = SourceLayer(np.zeros((2, 3)))
    vis = RBMVisLayer(layer_conf('name: "v" rbm_conf { hdim: 2 } param {} param {}'), make_ctx())
    vis.setup([src])
    with pytest.raises(SingaError, match="kRBMHid"):
        vis.forward(kNegative, [src])


def test_missing_hdim_is_a_config_error():
    src = SourceLayer(np.zeros((2, 3)))
    vis = RBMVisLayer(layer_conf('name: "v" param {} param {}'), make_ctx())
    with pytest.raises(SingaError, match="hdim"):
        vis.setup([src, None])


def test_takes_no_backprop_gradient():
    src, vis, hid = make_pair(np.zeros((B, VDIM), np.float32))
    assert vis.grad_for(hid) is None and vis.grad is None


def _case(tmp_path):
    x = (np.random.default_rng(4).random((B, VDIM)) > 0.5).astype(np.float32)
    src, vis, hid = make_pair(x)
    cd_step(src, vis, hid)
    return GradCase(
        vis,
        [src, hid],
        no_gradient="CD: the update direction is not the gradient of an objective; checked "
        "against the CD formula in test_phases_and_gradients_match_numpy",
    )


GRADIENT_CASES = {"kRBMVis": _case}
