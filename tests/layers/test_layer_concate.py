"""kConcate: concatenation along concate_dim; backward splits the gradient back.

Includes SINGA 0.3's test_connection_layers.cc DataConcate / ModelConcate (N=10, M=20, K=5,
kDummy inputs and output).
"""

import numpy as np
import pytest
from singa_builtins.layers.concate import ConcateLayer
from singa_builtins.layers.dummy import DummyLayer

from singa_core.errors import SingaError
from singa_core.layer import kBackward, kForward, kTrain
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


def concate_conf(dim, num):
    return f'name: "concate" concate_conf {{ concate_dim: {dim} num_concates: {num} }}'


def _run_0_3_test(dim):
    shape = (N // K, M) if dim == 0 else (N, M // K)
    ins = [
        build(
            DummyLayer,
            f'name: "in{k}" dummy_conf {{ input: true shape: {shape[0]} shape: {shape[1]} }}',
            [],
            seed=k,
        )
        for k in range(K)
    ]
    concate = build(ConcateLayer, concate_conf(dim, K), ins)
    out = build(DummyLayer, 'name: "out" dummy_conf { output: true }', [concate])
    assert concate.shape == (N, M) and out.shape == (N, M)
    for layer in ins:
        layer.forward(FWD, [])
    concate.forward(FWD, ins)
    out.forward(FWD, [concate])
    step = shape[dim]
    for i in range(N):
        for j in range(M):
            k = (i if dim == 0 else j) // step
            ii, jj = (i % step, j) if dim == 0 else (i, j % step)
            assert out.data[i, j] == ins[k].data[ii, jj]
    out.backward(BWD, [concate])
    concate.backward(BWD, ins)
    for i in range(N):
        for j in range(M):
            k = (i if dim == 0 else j) // step
            ii, jj = (i % step, j) if dim == 0 else (i, j % step)
            assert out.grad[i, j] == ins[k].grad[ii, jj]


def test_data_concate_0_3():
    _run_0_3_test(0)


def test_model_concate_0_3():
    _run_0_3_test(1)


def test_unequal_parts_match_numpy():
    assert ConcateLayer.type_names == ("kConcate",)
    rng = np.random.default_rng(0)
    srcs = [SourceLayer(rng.standard_normal((3, w, 2)), name=f"s{w}") for w in (1, 4, 2)]
    layer = build(ConcateLayer, concate_conf(1, 3), srcs)
    layer.forward(FWD, srcs)
    np.testing.assert_array_equal(layer.data, np.concatenate([s.data for s in srcs], axis=1))
    g = rng.standard_normal(layer.shape).astype(np.float32)
    layer.grad[...] = g
    layer.backward(BWD, srcs)
    for s, part in zip(srcs, np.split(g, [1, 5], axis=1), strict=True):
        np.testing.assert_array_equal(s.grad, part)


def test_strided_sources_and_sources_without_gradient():
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    a = SourceLayer(np.zeros((4, 3)), name="a")
    a.data = base[:, ::2]  # a strided view
    b = SourceLayer(np.ones((4, 2)), name="b", grad=False)
    layer = build(ConcateLayer, concate_conf(1, 2), [a, b])
    layer.forward(FWD, [a, b])
    np.testing.assert_array_equal(layer.data, np.hstack([base[:, ::2], np.ones((4, 2))]))
    layer.grad[...] = 7.0
    layer.backward(BWD, [a, b])
    assert (a.grad == 7.0).all()


def test_errors():
    ctx = make_ctx(locate=lambda field=None: f"job.conf:{field}")
    x, y = SourceLayer(np.zeros((2, 3)), name="x"), SourceLayer(np.zeros((2, 4)), name="y")
    with pytest.raises(SingaError, match="num_concates is 1 but the layer has 2") as exc:
        ConcateLayer(layer_conf('name: "c"'), ctx).setup([x, y])
    assert exc.value.where == "job.conf:concate_conf"
    with pytest.raises(SingaError, match="concate_dim 2 is not a dimension"):
        ConcateLayer(layer_conf(concate_conf(2, 2)), ctx).setup([x, y])
    with pytest.raises(SingaError, match="differ in a dimension other than concate_dim 0"):
        ConcateLayer(layer_conf(concate_conf(0, 2)), ctx).setup([x, y])
    z = SourceLayer(np.zeros((2, 3, 1)), name="z")
    with pytest.raises(SingaError, match="differ"):
        ConcateLayer(layer_conf(concate_conf(1, 2)), ctx).setup([x, z])
    with pytest.raises(SingaError, match="source"):
        ConcateLayer(layer_conf(concate_conf(0, 0)), ctx).setup([])


def test_no_allocation_per_step():
    srcs = [SourceLayer(np.ones((64, 500)), name=f"s{k}") for k in range(3)]
    layer = build(ConcateLayer, concate_conf(1, 3), srcs)

    def step():
        layer.forward(FWD, srcs)
        layer.backward(BWD, srcs)

    assert peak_bytes(step) < 2_000


def _case(tmp_path):
    rng = np.random.default_rng(5)
    srcs = [SourceLayer(rng.standard_normal((3, w)), name=f"s{w}") for w in (2, 3)]
    layer = build(ConcateLayer, concate_conf(1, 2), srcs)
    return GradCase(layer, srcs, GradientChecker())


GRADIENT_CASES = {"kConcate": _case}
