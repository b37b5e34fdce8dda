"""kEuclideanLoss: reported Σ(t−p)²/B, gradient (p−t)/B to the prediction only."""

import numpy as np
import pytest
from singa_builtins.layers.euclidean_loss import EuclideanLossLayer

from singa_core.errors import SingaError
from singa_core.layer import kBackward, kForward, kTrain
from singa_core.testing import GradCase, GradientChecker, SourceLayer, build, layer_conf, make_ctx


def test_loss_and_gradient():
    assert EuclideanLossLayer.type_names == ("kEuclideanLoss",)
    rng = np.random.default_rng(0)
    pred = SourceLayer(rng.standard_normal((4, 6)), name="recon")
    target = SourceLayer(rng.standard_normal((4, 2, 3)), name="data")  # same count, other shape
    layer = build(EuclideanLossLayer, 'name: "loss"', [pred, target])
    layer.forward(kTrain | kForward, [pred, target])
    p = pred.data.astype(np.float64)
    t = target.data.reshape(4, 6).astype(np.float64)
    assert layer.loss == pytest.approx(((t - p) ** 2).sum() / 4, rel=1e-6)
    assert layer.pop_metrics() == {"loss": pytest.approx(((t - p) ** 2).sum() / 4, rel=1e-6)}
    target.grad[...] = 7.0
    layer.backward(kTrain | kBackward, [pred, target])
    np.testing.assert_allclose(pred.grad, (p - t) / 4, rtol=1e-6)
    assert (target.grad == 7.0).all()  # the target takes no gradient


def test_gradient_is_that_of_half_the_reported_loss():
    rng = np.random.default_rng(1)
    pred = SourceLayer(rng.standard_normal((3, 5)))
    target = SourceLayer(rng.standard_normal((3, 5)), grad=False)
    layer = build(EuclideanLossLayer, 'name: "loss"', [pred, target])
    GradientChecker(loss_scale=0.5).check(layer, [pred, target])
    with pytest.raises(AssertionError):
        GradientChecker(loss_scale=1.0).check(layer, [pred, target])


def test_errors():
    ctx = make_ctx(locate=lambda field=None: f"job.conf:{field}")
    a, b = SourceLayer(np.zeros((2, 3))), SourceLayer(np.zeros((2, 4)))
    with pytest.raises(SingaError, match="has 6 values") as exc:
        EuclideanLossLayer(layer_conf('name: "l"'), ctx).setup([a, b])
    assert exc.value.where == "job.conf:srclayers"
    with pytest.raises(SingaError, match="2 source"):
        EuclideanLossLayer(layer_conf('name: "l"'), ctx).setup([a])


def _case(tmp_path):
    rng = np.random.default_rng(1)
    pred = SourceLayer(rng.standard_normal((3, 5)))
    target = SourceLayer(rng.standard_normal((3, 5)), grad=False)
    layer = build(EuclideanLossLayer, 'name: "loss"', [pred, target])
    return GradCase(layer, [pred, target], GradientChecker(loss_scale=0.5))


GRADIENT_CASES = {"kEuclideanLoss": _case}
