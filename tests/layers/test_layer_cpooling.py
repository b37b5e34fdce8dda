"""kCPooling (and the kCudnnPool alias): MAX with Caffe's first-maximum routing, AVG,
SINGA's floor output size, padding, x/y windows, both memory layouts of the source."""

import numpy as np
import pytest
from singa_builtins.layers.cpooling import CPoolingLayer

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
from tests.layers.spatial_reference import pool_forward_backward, strided_source


def pool(srcs, pool_conf):
    return build(CPoolingLayer, f'name: "pool" pooling_conf {{ {pool_conf} }}', srcs)


@pytest.fixture(autouse=True, params=["numba", "numpy"])
def pool_path(request, monkeypatch):
    """Every test runs on both paths: the compiled kernels (when numba is installed) and
    the pure-numpy fallback (``SINGA_NUMBA=0``)."""
    if request.param == "numba":
        pytest.importorskip("numba")
    monkeypatch.setenv("SINGA_NUMBA", "1" if request.param == "numba" else "0")
    return request.param


def both_paths():
    """Environment settings building a layer on each path (for the gradient cases)."""
    import importlib.util
    import os

    settings = ["0"] + (["1"] if importlib.util.find_spec("numba") is not None else [])
    before = os.environ.get("SINGA_NUMBA")
    try:
        for value in settings:
            os.environ["SINGA_NUMBA"] = value
            yield value
    finally:
        if before is None:
            os.environ.pop("SINGA_NUMBA", None)
        else:
            os.environ["SINGA_NUMBA"] = before


GEOMETRIES = [
    # pooling_conf without the method, (kh, kw, ph, pw, sh, sw)
    ("kernel: 2 stride: 2", (2, 2, 0, 0, 2, 2)),  # LeNet: non-overlapping
    ("kernel: 3 stride: 2", (3, 3, 0, 0, 2, 2)),  # CIFAR-10: overlapping
    ("kernel: 2 stride: 3", (2, 2, 0, 0, 3, 3)),  # gaps between windows
    ("kernel: 3 stride: 2 pad: 1", (3, 3, 1, 1, 2, 2)),
    ("kernel_y: 2 kernel_x: 3 stride_y: 1 stride_x: 2 pad_x: 1", (2, 3, 0, 1, 1, 2)),
]


def test_registered_names():
    assert CPoolingLayer.type_names == ("kCPooling", "kCudnnPool")


def test_defaults_and_floor_sizes():
    src = SourceLayer(np.zeros((2, 32, 32, 32)))
    assert pool([src], "").data.shape == (2, 32, 15, 15)  # default MAX k3 s2: 32 -> 15
    s15 = SourceLayer(np.zeros((2, 32, 15, 15)))
    assert pool([s15], "pool: AVG kernel: 3 stride: 2").data.shape == (2, 32, 7, 7)
    s7 = SourceLayer(np.zeros((2, 64, 7, 7)))
    assert pool([s7], "pool: AVG kernel: 3 stride: 2").data.shape == (2, 64, 3, 3)
    s24 = SourceLayer(np.zeros((2, 20, 24, 24)))
    assert pool([s24], "kernel: 2 stride: 2").data.shape == (2, 20, 12, 12)


@pytest.mark.parametrize("strided", [False, True])
@pytest.mark.parametrize("method", ["MAX", "AVG"])
@pytest.mark.parametrize(("text", "geom"), GEOMETRIES)
def test_against_reference(text, geom, method, strided, pool_path):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 2, 9, 8)).astype(np.float32)
    src = strided_source(x) if strided else SourceLayer(x)
    layer = pool([src], f"pool: {method} {text}")
    assert (layer._kernels is not None) == (pool_path == "numba")
    layer.forward(kTrain | kForward, [src])
    g = rng.standard_normal(layer.data.shape)
    y, gx = pool_forward_backward(x, g, method, *geom)
    np.testing.assert_allclose(layer.data, y, rtol=1e-6, atol=1e-6)
    src.grad[...] = np.nan  # every element must be written
    layer.grad[...] = g
    layer.backward(kTrain | kBackward, [src])
    np.testing.assert_allclose(src.grad, gx, rtol=1e-6, atol=1e-6)
    # a second step gives the same (padding and buffers are reset by each pass)
    layer.forward(kTrain | kForward, [src])
    np.testing.assert_allclose(layer.data, y, rtol=1e-6, atol=1e-6)
    layer.backward(kTrain | kBackward, [src])
    np.testing.assert_allclose(src.grad, gx, rtol=1e-6, atol=1e-6)


def test_max_ties_route_to_the_first_maximum_only():
    # a constant window (MNIST's background after a conv is its bias): one input gets
    # the gradient, not all four (0.3's mshadow kPooling over-counted such ties)
    x = np.full((1, 1, 4, 4), 0.5, dtype=np.float32)
    src = SourceLayer(x)
    layer = pool([src], "pool: MAX kernel: 2 stride: 2")
    layer.forward(kTrain | kForward, [src])
    layer.grad[...] = 1.0
    layer.backward(kTrain | kBackward, [src])
    want = np.zeros((4, 4))
    want[::2, ::2] = 1.0
    np.testing.assert_array_equal(src.grad[0, 0], want)


def test_test_phase_gives_the_same_maxima():
    x = np.random.default_rng(0).standard_normal((2, 3, 9, 9)).astype(np.float32)
    src = SourceLayer(x)
    layer = pool([src], "pool: MAX kernel: 3 stride: 2")
    layer.forward(kTrain | kForward, [src])
    train = layer.data.copy()
    layer.forward(kTest | kForward, [src])
    np.testing.assert_array_equal(layer.data, train)


def test_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 3, 15, 15)).astype(np.float32)
    for method in ("MAX", "AVG"):
        src = SourceLayer(x)
        layer = pool([src], f"pool: {method} kernel: 3 stride: 2 pad: 1")
        layer.forward(kTrain | kForward, [src])
        g = rng.standard_normal(layer.data.shape).astype(np.float32)
        layer.grad[...] = g
        layer.backward(kTrain | kBackward, [src])
        xt = torch.tensor(x, requires_grad=True)
        if method == "MAX":
            y = torch.nn.functional.max_pool2d(xt, 3, 2, 1)
        else:
            y = torch.nn.functional.avg_pool2d(xt, 3, 2, 1, count_include_pad=True)
        y.backward(torch.tensor(g))
        np.testing.assert_allclose(layer.data, y.detach().numpy(), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(src.grad, xt.grad.numpy(), rtol=1e-5, atol=1e-6)


def locating_ctx():
    return make_ctx(locate=lambda field=None: f"job.conf:{field}")


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("kernel: 0", "positive"),
        ("stride: 0", "positive"),
        ("kernel: 7 stride: 1", "does not fit"),
        ("kernel: 16 stride: 16", "255"),
    ],
)
def test_config_errors(text, match):
    src = SourceLayer(np.zeros((1, 1, 20, 20)))
    src_small = SourceLayer(np.zeros((1, 1, 5, 5)))
    layer = CPoolingLayer(layer_conf(f'name: "p" pooling_conf {{ {text} }}'), locating_ctx())
    with pytest.raises(SingaError, match=match) as exc:
        layer.setup([src_small if "7" in text else src])
    # a window size is located at its own field, a size that does not fit at the block
    field = text.split(":")[0] if match == "positive" else None
    assert exc.value.where == "job.conf:pooling_conf" + (f".{field}" if field else "")


def test_no_allocation_per_step():
    buf = np.random.default_rng(0).standard_normal((20, 24, 24, 64)).astype(np.float32)
    src = SourceLayer(np.zeros((1, 1, 1, 1)))
    src.data = buf.transpose(3, 0, 1, 2)
    src.grad = np.zeros_like(src.data)
    for text in ("pool: MAX kernel: 2 stride: 2", "pool: AVG kernel: 3 stride: 2"):
        layer = CPoolingLayer(layer_conf(f'name: "p" pooling_conf {{ {text} }}'), make_ctx())
        layer.setup([src])

        def step(layer=layer):
            layer.forward(kTrain | kForward, [src])
            layer.backward(kTrain | kBackward, [src])

        # the input is 2.9 MB: only numpy's fixed ufunc buffers may be allocated
        assert peak_bytes(step) < 100_000


def _cases(tmp_path):
    rng = np.random.default_rng(9)
    checker = GradientChecker(stepsize=1e-3, threshold=1e-3)
    cases = []
    for _ in both_paths():
        for text, _ in GEOMETRIES:
            for method in ("MAX", "AVG"):
                # distinct values at least 0.01 apart keep MAX away from its kinks
                x = rng.permutation(2 * 2 * 7 * 7).reshape(2, 2, 7, 7) * 0.01
                for src in (SourceLayer(x), strided_source(x)):
                    layer = pool([src], f"pool: {method} {text}")
                    cases.append(GradCase(layer, [src], checker))
    return cases


GRADIENT_CASES = {"kCPooling": _cases}
