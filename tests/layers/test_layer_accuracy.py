"""kAccuracy: top-k indices (ArgSort) and the fraction of labels among them."""

import numpy as np
import pytest
from singa_builtins.layers.accuracy import AccuracyLayer

from singa_core.errors import SingaError
from singa_core.layer import kForward, kTest
from singa_core.testing import GradCase, SourceLayer, build, layer_conf, make_ctx


def run(scores, labels, text='name: "acc"'):
    src = SourceLayer(scores, name="ip")
    lab = SourceLayer(labels=labels, grad=False, name="data")
    layer = build(AccuracyLayer, text, [src, lab])
    layer.forward(kTest | kForward, [src, lab])
    return layer, src, lab


def test_top1():
    assert AccuracyLayer.type_names == ("kAccuracy",)
    layer, _, _ = run([[0.1, 0.7, 0.2], [0.5, 0.4, 0.1], [0.2, 0.3, 0.5], [0, 0, 1]], [1, 1, 2, 0])
    assert layer.data.shape == (4, 1)
    np.testing.assert_array_equal(layer.data[:, 0], [1, 0, 2, 2])
    assert layer.pop_metrics() == {"accuracy": pytest.approx(0.5)}
    assert layer.grad_for(layer) is None and layer.params == []


def test_topk_against_numpy_and_ties():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((20, 7))
    labels = rng.integers(0, 7, 20)
    layer, src, _ = run(x, labels, 'name: "acc" argsort_conf { topk: 3 }')
    top = np.argsort(-src.data, axis=1, kind="stable")[:, :3]
    np.testing.assert_array_equal(layer.data, top)
    want = np.mean([labels[n] in top[n] for n in range(20)])
    assert layer.pop_metrics()["accuracy"] == pytest.approx(want)
    # equal scores: the higher index ranks first (std::greater on (value, index) pairs)
    layer, _, _ = run(np.zeros((2, 4)), [3, 1], 'name: "acc" argsort_conf { topk: 2 }')
    np.testing.assert_array_equal(layer.data, [[3, 2], [3, 2]])
    assert layer.pop_metrics()["accuracy"] == pytest.approx(0.5)


def test_metric_averages_batches():
    src = SourceLayer([[1.0, 0.0], [0.0, 1.0]])
    lab = SourceLayer(labels=[0, 1], grad=False)
    layer = build(AccuracyLayer, 'name: "acc"', [src, lab])
    layer.forward(kTest | kForward, [src, lab])
    lab.aux[:] = [1, 1]
    layer.forward(kTest | kForward, [src, lab])
    assert layer.pop_metrics()["accuracy"] == pytest.approx(0.75)


def test_errors():
    ctx = make_ctx(locate=lambda field=None: f"job.conf:{field}")
    x = SourceLayer(np.zeros((2, 3)))
    lab = SourceLayer(labels=[0, 1], grad=False)
    with pytest.raises(SingaError, match="2 source"):
        AccuracyLayer(layer_conf('name: "a"'), ctx).setup([x])
    with pytest.raises(SingaError, match="topk") as exc:
        AccuracyLayer(layer_conf('name: "a" argsort_conf { topk: 4 }'), ctx).setup([x, lab])
    assert exc.value.where == "job.conf:argsort_conf.topk"
    nolab = SourceLayer(np.zeros((2, 1)), grad=False)
    with pytest.raises(SingaError, match="no labels"):  # found at setup, before training
        build(AccuracyLayer, 'name: "a"', [x, nolab])


def _case(tmp_path):
    src = SourceLayer(np.random.default_rng(0).standard_normal((4, 3)))
    lab = SourceLayer(labels=[0, 1, 2, 0], grad=False, name="data")
    layer = build(AccuracyLayer, 'name: "acc"', [src, lab])
    assert layer.grad_for(layer) is None
    return GradCase(layer, [src, lab], no_gradient="an output layer: it reports accuracy only")


GRADIENT_CASES = {"kAccuracy": _case}
