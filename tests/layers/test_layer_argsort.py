"""kArgSort: indices of the top-k values per row, descending, higher index first on ties."""

import numpy as np
import pytest
from singa_builtins.layers.argsort import ArgSortLayer

from singa_core.errors import SingaError
from singa_core.layer import kForward, kTest
from singa_core.testing import GradCase, SourceLayer, build, layer_conf, make_ctx


def run(x, text='name: "sort"'):
    src = SourceLayer(x)
    layer = build(ArgSortLayer, text, [src])
    layer.forward(kTest | kForward, [src])
    return layer, src


def test_top1_and_topk_against_numpy():
    assert ArgSortLayer.type_names == ("kArgSort",)
    layer, _ = run([[0.1, 0.7, 0.2], [0.5, 0.4, 0.1]])
    assert layer.data.shape == (2, 1) and layer.data.dtype == np.float32
    np.testing.assert_array_equal(layer.data[:, 0], [1, 0])
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 2, 4))  # flattened to 8 values per instance
    layer, _ = run(x, 'name: "sort" argsort_conf { topk: 3 }')
    want = np.argsort(-x.reshape(6, 8), axis=1, kind="stable")[:, :3]
    np.testing.assert_array_equal(layer.data, want)
    assert layer.grad is None and layer.params == [] and layer.grad_for(layer) is None


def test_ties_rank_the_higher_index_first():
    # std::greater on (value, index) pairs, as 0.3's partial_sort
    layer, _ = run([[1.0, 3.0, 3.0, 1.0, 3.0]], 'name: "sort" argsort_conf { topk: 4 }')
    np.testing.assert_array_equal(layer.data, [[4, 2, 1, 3]])


def test_errors():
    ctx = make_ctx(locate=lambda field=None: f"job.conf:{field}")
    src = SourceLayer(np.zeros((2, 3)))
    with pytest.raises(SingaError, match="topk") as exc:
        ArgSortLayer(layer_conf('name: "s" argsort_conf { topk: 4 }'), ctx).setup([src])
    assert exc.value.where == "job.conf:argsort_conf.topk"
    with pytest.raises(SingaError, match="topk"):
        ArgSortLayer(layer_conf('name: "s" argsort_conf { topk: 0 }'), ctx).setup([src])
    with pytest.raises(SingaError, match="source"):
        ArgSortLayer(layer_conf('name: "s"'), ctx).setup([src, src])


def _case(tmp_path):
    src = SourceLayer(np.random.default_rng(0).standard_normal((4, 3)))
    layer = build(ArgSortLayer, 'name: "sort" argsort_conf { topk: 2 }', [src])
    assert layer.grad_for(layer) is None
    return GradCase(layer, [src], no_gradient="an output layer: it reports indices only")


GRADIENT_CASES = {"kArgSort": _case}
