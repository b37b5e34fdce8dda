"""kInnerProduct: forward/backward against numpy formulas, gradient check, shapes, errors."""

import tracemalloc

import numpy as np
import pytest
from singa_builtins.layers.inner_product import InnerProductLayer

from singa_core.errors import SingaError
from singa_core.layer import kAggGrad, kBackward, kForward, kTrain
from singa_core.testing import GradCase, GradientChecker, SourceLayer, build, layer_conf, make_ctx

CONF = 'name: "ip" innerproduct_conf { num_output: %d %s } param { name: "w" } param { name: "b" }'


def ip(srcs, n=3, extra="", **kw):
    return build(InnerProductLayer, CONF % (n, extra), srcs, **kw)


def test_registered_name():
    assert InnerProductLayer.type_names == ("kInnerProduct",)


def test_shapes_and_params():
    src = SourceLayer(np.zeros((4, 2, 3, 5)))
    layer = ip([src], n=7)
    assert layer.data.shape == (4, 7) and layer.grad.shape == (4, 7)
    w, b = layer.params
    assert (w.name, w.shape) == ("w", (7, 30))  # (out, in): fan_in = columns
    assert (b.name, b.shape) == ("b", (7,))
    t = ip([src], n=7, extra="transpose: true")
    assert t.params[0].shape == (30, 7)


def test_unnamed_params_get_layer_names():
    src = SourceLayer(np.zeros((2, 3)))
    text = 'name: "fc" innerproduct_conf { num_output: 2 } param {} param {}'
    layer = build(InnerProductLayer, text, [src])
    assert [p.name for p in layer.params] == ["fc/weight", "fc/bias"]


@pytest.mark.parametrize("transpose", [False, True])
def test_forward_backward_formulas(transpose):
    rng = np.random.default_rng(3)
    src = SourceLayer(rng.standard_normal((5, 2, 4)))
    layer = ip([src], n=6, extra="transpose: true" if transpose else "")
    w = layer.params[0].value.astype(np.float64)
    b = layer.params[1].value.astype(np.float64)
    x = src.data.reshape(5, 8).astype(np.float64)
    layer.forward(kTrain | kForward, [src])
    wt = w if transpose else w.T  # (in, out)
    np.testing.assert_allclose(layer.data, x @ wt + b, rtol=1e-5, atol=1e-5)

    g = rng.standard_normal((5, 6))
    layer.grad[...] = g
    layer.backward(kTrain | kBackward, [src])
    gw = x.T @ g if transpose else g.T @ x
    np.testing.assert_allclose(layer.params[0].grad, gw, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(layer.params[1].grad, g.sum(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(src.grad, (g @ wt.T).reshape(5, 2, 4), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("transpose", [False, True])
def test_gradient_check(transpose):
    rng = np.random.default_rng(0)
    src = SourceLayer(rng.standard_normal((3, 2, 5)))
    layer = ip([src], n=4, extra="transpose: true" if transpose else "")
    report = GradientChecker(stepsize=1e-2, threshold=1e-3).check(layer, [src])
    assert report.checked == 30 + 40 + 4


def test_agg_grad_accumulates_param_grads():
    rng = np.random.default_rng(1)
    src = SourceLayer(rng.standard_normal((2, 3)))
    layer = ip([src], n=2)
    layer.forward(kTrain | kForward, [src])
    layer.grad[...] = rng.standard_normal((2, 2))
    layer.backward(kTrain | kBackward, [src])
    gw, gb = layer.params[0].grad.copy(), layer.params[1].grad.copy()
    gx = src.grad.copy()
    layer.backward(kTrain | kBackward | kAggGrad, [src])
    np.testing.assert_allclose(layer.params[0].grad, 2 * gw, rtol=1e-6)
    np.testing.assert_allclose(layer.params[1].grad, 2 * gb, rtol=1e-6)
    np.testing.assert_allclose(src.grad, gx)  # the source gradient is still overwritten
    layer.backward(kTrain | kBackward, [src])  # without the flag: overwrite again
    np.testing.assert_allclose(layer.params[0].grad, gw, rtol=1e-6)


def test_source_without_gradient_is_skipped():
    src = SourceLayer(np.ones((2, 3)), grad=False)
    layer = ip([src], n=2)
    layer.forward(kTrain | kForward, [src])
    layer.backward(kTrain | kBackward, [src])  # no buffer to write: no error
    assert np.isfinite(layer.params[0].grad).all()


def test_shared_weight_value_is_used():
    # a net may replace a Param's value array after setup (share_from): forward must read it
    src = SourceLayer(np.ones((1, 2)))
    layer = ip([src], n=1)
    layer.params[0].value = np.array([[2.0, 3.0]], dtype=np.float32)
    layer.params[1].value = np.array([1.0], dtype=np.float32)
    layer.forward(kTrain | kForward, [src])
    assert layer.data[0, 0] == 6.0


def test_partitioned_on_dim_1_divides_num_output():
    src = SourceLayer(np.zeros((2, 3)))
    conf = layer_conf(CONF % (8, ""))
    conf.partition_dim = 1
    layer = InnerProductLayer(conf, make_ctx(num_partitions=2))
    layer.setup([src])
    assert layer.data.shape == (2, 4)


def locating_ctx():
    return make_ctx(locate=lambda field=None: f"job.conf:{field}")


def test_missing_num_output_is_an_error():
    src = SourceLayer(np.zeros((2, 3)))
    for text in [
        'name: "ip" param {} param {}',
        'name: "ip" innerproduct_conf { transpose: true } param {} param {}',
    ]:
        layer = InnerProductLayer(layer_conf(text), locating_ctx())
        with pytest.raises(SingaError, match="num_output") as exc:
            layer.setup([src])
        assert exc.value.where == "job.conf:innerproduct_conf"


def test_missing_params_are_an_error():
    src = SourceLayer(np.zeros((2, 3)))
    layer = InnerProductLayer(
        layer_conf('name: "ip" innerproduct_conf { num_output: 2 } param {}'), locating_ctx()
    )
    with pytest.raises(SingaError, match="bias"):
        layer.setup([src])


def test_wrong_number_of_sources():
    a, b = SourceLayer(np.zeros((2, 3))), SourceLayer(np.zeros((2, 3)))
    layer = InnerProductLayer(layer_conf(CONF % (2, "")), locating_ctx())
    with pytest.raises(SingaError, match="1 source layer") as exc:
        layer.setup([a, b])
    assert exc.value.where == "job.conf:srclayers"
    with pytest.raises(SingaError):
        InnerProductLayer(layer_conf(CONF % (2, "")), locating_ctx()).setup([])


def test_no_allocation_per_step():
    rng = np.random.default_rng(0)
    src = SourceLayer(rng.standard_normal((64, 800)))
    layer = ip([src], n=1000)
    for flag in (0, kAggGrad):
        for _ in range(2):  # warm up (kAggGrad allocates its scratch once)
            layer.forward(kTrain | kForward, [src])
            layer.backward(kTrain | kBackward | flag, [src])
        tracemalloc.start()
        for _ in range(3):
            layer.forward(kTrain | kForward, [src])
            layer.backward(kTrain | kBackward | flag, [src])
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        # buffers are >= 64x800 floats = 205 KB; numpy's broadcasting (bias add) uses a
        # transient iterator buffer of at most 8192 elements (32 KB)
        assert peak < 40_000, peak


def test_checker_catches_a_wrong_gradient():
    class Broken(InnerProductLayer):
        def backward(self, phase, srcs):
            super().backward(phase, srcs)
            self.params[1].grad *= 1.1

    rng = np.random.default_rng(0)
    src = SourceLayer(rng.standard_normal((3, 4)))
    layer = build(Broken, CONF % (2, ""), [src])
    with pytest.raises(AssertionError, match="failed"):
        GradientChecker().check(layer, [src])


def test_strided_source_gradient_buffer():
    rng = np.random.default_rng(2)

    class StridedSource(SourceLayer):
        def __init__(self, data):
            super().__init__(data)
            self.big = np.zeros((data.shape[0], data.shape[1] * 2), dtype=np.float32)
            self.grad = self.big[:, ::2]  # a non-contiguous view

    src = StridedSource(rng.standard_normal((3, 4)))
    layer = ip([src], n=2)
    layer.forward(kTrain | kForward, [src])
    layer.grad[...] = rng.standard_normal((3, 2))
    layer.backward(kTrain | kBackward, [src])
    w = layer.params[0].value
    np.testing.assert_allclose(src.big[:, ::2], layer.grad @ w, rtol=1e-5)
    assert (src.big[:, 1::2] == 0).all()


def _cases(tmp_path):
    cases = []
    for extra in ("", "transpose: true"):
        src = SourceLayer(np.random.default_rng(0).standard_normal((3, 2, 5)))
        cases.append(GradCase(ip([src], n=4, extra=extra), [src]))
    return cases


GRADIENT_CASES = {"kInnerProduct": _cases}
