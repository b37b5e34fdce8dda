"""A first convolution unfolded a block of output positions at a time
(plugins/layers/_conv_blocks.py): the same output and parameter gradients as the loop
reference at 1 and 2 threads, partial last blocks included, repeatable; chosen only for a
source without a gradient and a matrix over half the last-level cache; the cache sizes read
from sysfs."""

from __future__ import annotations

import numpy as np
import pytest
from singa_builtins.layers import _conv, _conv_blocks
from singa_builtins.layers.cconvolution import CConvolutionLayer

from singa_core.blas import get_blas_threads, set_blas_threads
from singa_core.layer import kBackward, kForward, kTrain
from singa_core.resources import cache_bytes
from singa_core.testing import SourceLayer, build
from tests.layers.spatial_reference import strided_source
from tests.layers.test_layer_cconvolution import GEOMETRIES, PARAMS, check_against_reference


def conv(srcs, conv_conf):
    return build(
        CConvolutionLayer, f'name: "conv" convolution_conf {{ {conv_conf} }} {PARAMS}', srcs
    )


@pytest.fixture
def blocks(monkeypatch):
    """The block path wherever it can run: full im2col, every matrix big enough, 3 output
    positions a block (so that most layers end with a partial block)."""
    if not _conv_blocks.available():
        pytest.skip("needs numba (the fast extra) and numpy's OpenBLAS as the host SGEMM")
    monkeypatch.setattr(_conv, "ROW_COLUMNS_MIN_K", 10**9)
    monkeypatch.setattr(_conv_blocks, "pays", lambda rows, cols: True)
    monkeypatch.setattr(_conv_blocks, "positions_per_block", lambda rows, batch: 3)


@pytest.fixture(params=[1, 2])
def threads(request):
    before = get_blas_threads() or 1
    if request.param > 1:
        import numba

        if numba.config.NUMBA_NUM_THREADS < 2:
            pytest.skip("numba's pool has one thread here")
    set_blas_threads(request.param)
    yield request.param
    set_blas_threads(before)


@pytest.mark.parametrize("strided", [False, True])
@pytest.mark.parametrize(("text", "geom"), GEOMETRIES)
def test_blocks_equal_the_reference(blocks, threads, text, geom, strided):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((5, 2, 7, 6)).astype(np.float32)
    src = strided_source(x) if strided else SourceLayer(x)
    src.grad = None  # an input layer's: no source gradient
    layer = conv([src], text)
    assert layer._blocks is not None and layer._colx is None
    check_against_reference(layer, src, x, geom, rng)
    y1, gw1 = layer.data.copy(), layer.params[0].grad.copy()
    layer.forward(kTrain | kForward, [src])
    layer.backward(kTrain | kBackward, [src])
    assert np.array_equal(layer.data, y1) and np.array_equal(layer.params[0].grad, gw1)


def test_a_source_with_a_gradient_keeps_the_whole_matrix(blocks):
    x = np.random.default_rng(0).standard_normal((2, 2, 6, 6))
    layer = conv([SourceLayer(x)], "num_filters: 3 kernel: 3")
    assert layer._blocks is None and layer._colx is not None


def test_blocks_are_chosen_by_the_cache(monkeypatch):
    from singa_builtins.layers import _conv_blocks as cb

    monkeypatch.setattr(cb, "cache_bytes", lambda level: {0: 32 << 20, 2: 1 << 20}[level])
    # CIFAR-10's conv1 at batch 100: 76 rows of 102,400 columns, 31 MB > 16 MB
    assert cb.pays(76, 32 * 32 * 100)
    assert not cb.pays(26, 24 * 24 * 64)  # LeNet's first: 3.8 MB stays cached
    assert cb.positions_per_block(76, 100) == (1 << 18) // (76 * 100 * 4) == 8
    assert cb.positions_per_block(10**6, 100) == 1
    monkeypatch.setattr(cb, "cache_bytes", lambda level: None)  # sysfs says nothing
    assert cb.pays(76, 32 * 32 * 100) and cb.positions_per_block(76, 100) >= 1


def test_cache_sizes_come_from_sysfs(tmp_path):
    cpu = tmp_path / "cpu0" / "cache"
    for i, (level, kind, size) in enumerate(
        [(1, "Data", "48K"), (1, "Instruction", "32K"), (2, "Unified", "2048K"),
         (3, "Unified", "105M")]
    ):  # fmt: skip
        d = cpu / f"index{i}"
        d.mkdir(parents=True)
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    assert cache_bytes(1, tmp_path) == 48 << 10
    assert cache_bytes(2, tmp_path) == 2 << 20
    assert cache_bytes(3, tmp_path) == cache_bytes(0, tmp_path) == 105 << 20
    assert cache_bytes(2, tmp_path / "nowhere") is None
