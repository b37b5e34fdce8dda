"""kSlice: equal parts of the source, one per consumer (order of first access).

Includes SINGA 0.3's test_connection_layers.cc DataSlice / ModelSlice (N=10, M=20, K=5,
a kDummy input and K kDummy outputs, each reading its part through ``output_for``).
"""

import numpy as np
import pytest
from singa_builtins.layers.concate import ConcateLayer
from singa_builtins.layers.dummy import DummyLayer
from singa_builtins.layers.slice import SliceLayer, SliceOutput

from singa_core.errors import SingaError
from singa_core.layer import Layer, kBackward, kForward, kTrain
from singa_core.testing import (
    GradCase,
    GradientChecker,
    SourceLayer,
    build,
    layer_conf,
    make_ctx,
    peak_bytes,
)

N, M, K = 10, 20, 5
FWD, BWD = kTrain | kForward, kTrain | kBackward


def slice_conf(dim, num):
    return f'name: "slice" slice_conf {{ slice_dim: {dim} num_slices: {num} }}'


def consumers(n):
    return [Layer(layer_conf(name=f"c{i}")) for i in range(n)]


def _run_0_3_test(dim):
    src = build(DummyLayer, f'name: "in" dummy_conf {{ input: true shape: {N} shape: {M} }}', [])
    slice_ = build(SliceLayer, slice_conf(dim, K), [src])
    part = (N // K, M) if dim == 0 else (N, M // K)
    assert slice_.shape == part  # 0.3: slice.data(nullptr) is part 0
    outs = []
    for k in range(K):
        conf = layer_conf(f'name: "out{k}" dummy_conf {{ output: true }}')
        out = DummyLayer(conf, make_ctx(seed=k))
        view = slice_.output_for(out)  # what the consumer sees as its source
        out.setup([view])
        assert out.shape == part
        outs.append((out, view))
    src.forward(FWD, [])
    slice_.forward(FWD, [src])
    for out, view in outs:
        out.forward(FWD, [view])
    step = part[dim]
    for k, (out, _) in enumerate(outs):
        for i in range(part[0]):
            for j in range(part[1]):
                ii, jj = (k * step + i, j) if dim == 0 else (i, k * step + j)
                assert out.data[i, j] == src.data[ii, jj]
    for out, view in reversed(outs):
        out.backward(BWD, [view])
    slice_.backward(BWD, [src])
    for k, (out, _) in enumerate(outs):
        for i in range(part[0]):
            for j in range(part[1]):
                ii, jj = (k * step + i, j) if dim == 0 else (i, k * step + j)
                assert out.grad[i, j] == src.grad[ii, jj]


def test_data_slice_0_3():
    _run_0_3_test(0)


def test_model_slice_0_3():
    _run_0_3_test(1)


def test_parts_are_views_in_order_of_first_access():
    assert SliceLayer.type_names == ("kSlice",)
    assert SliceLayer.one_to_many  # the net inserts no kSplit after it
    src = SourceLayer(np.arange(24).reshape(2, 12))
    layer = build(SliceLayer, slice_conf(1, 3), [src])
    a, b, c = consumers(3)
    np.testing.assert_array_equal(layer.data_for(b), src.data[:, :4])  # b came first
    assert np.shares_memory(layer.data_for(b), src.data)
    view = layer.output_for(a)
    assert isinstance(view, SliceOutput) and view.name == "slice[1]"
    np.testing.assert_array_equal(view.data, src.data[:, 4:8])
    assert view.grad_for(c) is layer.grads[1] is layer.grad_for(a) is view.grad
    assert layer.grad_for(b) is layer.grad is layer.grads[0]
    np.testing.assert_array_equal(layer.data_for(c), src.data[:, 8:])
    assert view.labels() is None and view.shape == (2, 4)


def test_backward_writes_every_part_and_unused_parts_are_zero():
    src = SourceLayer(np.ones((6, 2)))
    layer = build(SliceLayer, slice_conf(0, 3), [src])
    a, b = consumers(2)
    layer.data_for(a), layer.data_for(b)
    layer.grad_for(a)[...] = 1.0
    layer.grad_for(b)[...] = 2.0
    src.grad[...] = np.nan
    layer.backward(BWD, [src])
    np.testing.assert_array_equal(src.grad[:, 0], [1, 1, 2, 2, 0, 0])


def test_a_new_source_array_gives_new_views():
    src = SourceLayer(np.zeros((4, 2)))
    layer = build(SliceLayer, slice_conf(0, 2), [src])
    view0, view1 = (layer.output_for(c) for c in consumers(2))
    src.data = np.arange(8, dtype=np.float32).reshape(4, 2)
    layer.forward(FWD, [src])
    np.testing.assert_array_equal(layer.data, [[0, 1], [2, 3]])
    assert view0.data is layer.data
    np.testing.assert_array_equal(view1.data, [[4, 5], [6, 7]])


def test_slice_then_concate_is_the_identity():
    rng = np.random.default_rng(2)
    src = SourceLayer(rng.standard_normal((4, 6, 2)))
    layer = build(SliceLayer, slice_conf(1, 3), [src])
    concate = ConcateLayer(layer_conf('name: "c" concate_conf { concate_dim: 1 num_concates: 3 }'))
    ends = consumers(3)  # e.g. one bridge per part in a partitioned net
    views = [layer.output_for(e) for e in ends]
    concate.setup(views)
    layer.forward(FWD, [src])
    concate.forward(FWD, views)
    np.testing.assert_array_equal(concate.data, src.data)
    g = rng.standard_normal(concate.shape).astype(np.float32)
    concate.grad[...] = g
    concate.backward(BWD, views)
    layer.backward(BWD, [src])
    np.testing.assert_array_equal(src.grad, g)


def test_errors():
    ctx = make_ctx(locate=lambda field=None: f"job.conf:{field}")
    src = SourceLayer(np.zeros((10, 20)))
    with pytest.raises(SingaError, match="num_slices 3 does not divide the size 10") as exc:
        SliceLayer(layer_conf(slice_conf(0, 3)), ctx).setup([src])
    assert exc.value.where == "job.conf:slice_conf"
    with pytest.raises(SingaError, match="num_slices 0"):
        SliceLayer(layer_conf(slice_conf(0, 0)), ctx).setup([src])
    with pytest.raises(SingaError, match="slice_dim 2 is not a dimension"):
        SliceLayer(layer_conf(slice_conf(2, 2)), ctx).setup([src])
    with pytest.raises(SingaError, match="source"):
        SliceLayer(layer_conf(slice_conf(0, 2)), ctx).setup([src, src])
    layer = SliceLayer(layer_conf(slice_conf(0, 2)), ctx)
    layer.setup([src])
    a, b, c = consumers(3)
    layer.data_for(a), layer.data_for(b)
    with pytest.raises(SingaError, match="consumer number 3"):
        layer.output_for(c)


def test_a_consumer_that_read_data_cannot_take_another_parts_gradient():
    src = SourceLayer(np.zeros((4, 2)))
    layer = build(SliceLayer, slice_conf(0, 2), [src])
    a, b = consumers(2)
    assert layer.grad_for(a) is layer.grads[0]  # read `data` (part 0): consistent
    with pytest.raises(
        SingaError, match="'c1' was given the gradient buffer of part 1 but read part 0"
    ):
        layer.grad_for(b)


def test_no_allocation_per_step():
    src = SourceLayer(np.ones((64, 2000)))
    layer = build(SliceLayer, slice_conf(1, 4), [src])
    for c in consumers(4):
        layer.data_for(c)

    def step():
        layer.forward(FWD, [src])
        layer.backward(BWD, [src])

    assert peak_bytes(step) < 2_000


def _tops(cs):
    def tops(lay):
        for c in cs:  # each consumer reads its part before asking for its gradient buffer
            lay.data_for(c)
        return [(lambda c=c: lay.data_for(c), lay.grad_for(c)) for c in cs]

    return tops


def _case(tmp_path):
    rng = np.random.default_rng(1)
    cases = []
    for dim in (0, 1):
        src = SourceLayer(rng.standard_normal((4, 6)))
        layer = build(SliceLayer, slice_conf(dim, 2), [src])
        cases.append(GradCase(layer, [src], GradientChecker(), tops=_tops(consumers(2))))
    return cases


GRADIENT_CASES = {"kSlice": _case}
