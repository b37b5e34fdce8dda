"""kSoftmaxLoss: softmax cross-entropy, top-k accuracy and gradient exactly as 0.3."""

import numpy as np
import pytest
from singa_builtins.layers.softmax_loss import SoftmaxLossLayer

from singa_core.errors import SingaError
from singa_core.layer import kBackward, kForward, kTest, kTrain
from singa_core.testing import (
    GradCase,
    GradientChecker,
    SourceLayer,
    build,
    layer_conf,
    make_ctx,
    peak_bytes,
)


def softmax(x):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def setup_loss(logits, labels, text='name: "loss"'):
    src = SourceLayer(logits, name="ip")
    lab = SourceLayer(labels=labels, grad=False, name="data")
    return build(SoftmaxLossLayer, text, [src, lab]), src, lab


@pytest.mark.parametrize("topk,scale", [(1, 1.0), (2, 1.0), (3, 0.5)])
def test_loss_accuracy_and_gradient(topk, scale):
    rng = np.random.default_rng(topk)
    x = rng.standard_normal((6, 5)) * 2
    labels = rng.integers(0, 5, 6)
    layer, src, lab = setup_loss(
        x, labels, f'name: "loss" softmaxloss_conf {{ topk: {topk} scale: {scale} }}'
    )
    assert layer.data.shape == (6, 5) and layer.is_loss
    layer.forward(kTrain | kForward, [src, lab])
    p = softmax(src.data)
    np.testing.assert_allclose(layer.data, p, rtol=1e-5, atol=1e-7)
    loss = scale * -np.log(p[np.arange(6), labels]).sum() / 6
    top = np.argsort(-p, axis=1)[:, :topk]
    acc = scale * np.mean([labels[n] in top[n] for n in range(6)])
    assert layer.loss == pytest.approx(loss, rel=1e-5)
    metrics = layer.pop_metrics()
    assert metrics["loss"] == pytest.approx(loss, rel=1e-5)
    assert metrics["accuracy"] == pytest.approx(acc)
    assert layer.pop_metrics() == {}

    layer.backward(kTrain | kBackward, [src, lab])
    onehot = np.eye(5)[labels]
    np.testing.assert_allclose(src.grad, scale * (p - onehot) / 6, rtol=1e-5, atol=1e-7)


def test_metrics_average_over_batches():
    layer, src, lab = setup_loss(np.array([[5.0, 0.0], [5.0, 0.0]]), [0, 1])
    layer.forward(kTest | kForward, [src, lab])
    lab.aux[:] = [0, 0]
    layer.forward(kTest | kForward, [src, lab])
    assert layer.pop_metrics()["accuracy"] == pytest.approx(0.75)


def test_ties_rank_the_higher_class_index_first():
    # std::partial_sort with std::greater<pair<float,int>>: equal probabilities are ordered
    # by descending class index, so with all-equal logits the top-1 is the last class
    layer, src, lab = setup_loss(np.zeros((3, 4)), [3, 0, 2])
    layer.forward(kTest | kForward, [src, lab])
    assert layer.pop_metrics()["accuracy"] == pytest.approx(1 / 3)
    layer2, src2, lab2 = setup_loss(
        np.zeros((3, 4)), [3, 2, 1], 'name: "l" softmaxloss_conf { topk: 2 }'
    )
    layer2.forward(kTest | kForward, [src2, lab2])
    assert layer2.pop_metrics()["accuracy"] == pytest.approx(2 / 3)


def test_probability_is_clamped_at_flt_min():
    layer, src, lab = setup_loss(np.array([[0.0, 200.0]]), [0])
    layer.forward(kTrain | kForward, [src, lab])
    assert layer.loss == pytest.approx(-np.log(np.finfo(np.float32).tiny), rel=1e-6)  # 87.34


def test_multidimensional_logits():
    rng = np.random.default_rng(4)
    layer, src, lab = setup_loss(rng.standard_normal((2, 3, 1, 2)), [5, 0])
    layer.forward(kTrain | kForward, [src, lab])
    p = softmax(src.data.reshape(2, 6))
    np.testing.assert_allclose(layer.data.reshape(2, 6), p, rtol=1e-5)
    layer.backward(kTrain | kBackward, [src, lab])
    assert src.grad.shape == (2, 3, 1, 2)


@pytest.mark.parametrize("scale", [1.0, 3.0])
def test_gradient_check(scale):
    rng = np.random.default_rng(5)
    layer, src, lab = setup_loss(
        rng.standard_normal((4, 6)),
        rng.integers(0, 6, 4),
        f'name: "l" softmaxloss_conf {{ scale: {scale} }}',
    )
    report = GradientChecker(stepsize=1e-2, threshold=1e-3).check(layer, [src, lab])
    assert report.checked == 24


def test_source_without_gradient_is_skipped():
    src = SourceLayer(np.zeros((2, 3)), grad=False)
    lab = SourceLayer(labels=[0, 1], grad=False)
    layer = build(SoftmaxLossLayer, 'name: "l"', [src, lab])
    layer.forward(kTrain | kForward, [src, lab])
    layer.backward(kTrain | kBackward, [src, lab])


def locating_ctx():
    return make_ctx(locate=lambda field=None: f"job.conf:{field}")


def test_errors():
    x = SourceLayer(np.zeros((2, 3)))
    lab = SourceLayer(labels=[0, 1], grad=False)
    with pytest.raises(SingaError, match="2 source") as exc:
        SoftmaxLossLayer(layer_conf('name: "l"'), locating_ctx()).setup([x])
    assert exc.value.where == "job.conf:srclayers"
    with pytest.raises(SingaError, match="topk") as exc:
        SoftmaxLossLayer(
            layer_conf('name: "l" softmaxloss_conf { topk: 4 }'), locating_ctx()
        ).setup([x, lab])
    assert exc.value.where == "job.conf:softmaxloss_conf.topk"
    for bad in ([0, 3], [-1, 0]):
        layer = build(SoftmaxLossLayer, 'name: "l"', [x, SourceLayer(labels=bad, grad=False)])
        with pytest.raises(SingaError, match="outside"):
            layer.forward(kTrain | kForward, [x, SourceLayer(labels=bad, grad=False)])
    nolabels = SourceLayer(np.zeros((2, 1)), grad=False, name="nolab")
    with pytest.raises(SingaError, match="no labels"):  # found at setup, before training
        build(SoftmaxLossLayer, 'name: "l"', [x, nolabels])
    with pytest.raises(SingaError, match="labels for a batch"):
        build(SoftmaxLossLayer, 'name: "l"', [x, SourceLayer(labels=[1], grad=False)])


def test_no_large_allocation_per_step():
    rng = np.random.default_rng(0)
    layer, src, lab = setup_loss(rng.standard_normal((64, 1000)), rng.integers(0, 1000, 64))

    def step():
        layer.forward(kTrain | kForward, [src, lab])
        layer.backward(kTrain | kBackward, [src, lab])

    # arrays are 64x1000 floats = 256 KB; broadcasting ufuncs use numpy's transient
    # iterator buffer (at most 8192 elements)
    assert peak_bytes(step) < 40_000


def test_strided_gradient_buffer_and_float_labels():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((3, 4))
    src = SourceLayer(x)
    big = np.zeros((3, 8), dtype=np.float32)
    src.grad = big[:, ::2]
    lab = SourceLayer(grad=False, data=np.zeros((3, 1)))
    lab.aux = np.array([1.0, 3.0, 0.0])  # a label provider with float labels
    layer = build(SoftmaxLossLayer, 'name: "l"', [src, lab])
    layer.forward(kTrain | kForward, [src, lab])
    layer.backward(kTrain | kBackward, [src, lab])
    want = (softmax(src.data) - np.eye(4)[[1, 3, 0]]) / 3
    np.testing.assert_allclose(big[:, ::2], want, rtol=1e-5, atol=1e-7)
    assert (big[:, 1::2] == 0).all()


def _case(tmp_path):
    rng = np.random.default_rng(5)
    layer, src, lab = setup_loss(
        rng.standard_normal((4, 6)),
        rng.integers(0, 6, 4),
        'name: "l" softmaxloss_conf { scale: 2 }',
    )
    return GradCase(layer, [src, lab])


GRADIENT_CASES = {"kSoftmaxLoss": _case}
