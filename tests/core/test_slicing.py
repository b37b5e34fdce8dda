"""Param slicing and slice placement: the exact vectors of SINGA 0.3's test_common.cc (§4.1)."""

import pytest

from singa_core.netbuilder.slicing import partition_slices, slice_params

SIZES = [14112, 96, 256, 884736, 384]
EIGHT = [97984, *[112448] * 6, 112064]


def test_slice_one_box_keeps_params_whole():
    assert slice_params(1, SIZES) == [[s] for s in SIZES]


def test_slice_two_four_and_eight_boxes():
    assert slice_params(2, SIZES) == [[14112], [96], [256], [435328, 449408], [384]]
    assert slice_params(4, SIZES) == [[14112], [96], [256], [210432, 224896, 224896, 224512], [384]]
    assert slice_params(8, SIZES) == [[14112], [96], [256], EIGHT, [384]]


def test_slice_zero_boxes_is_empty():
    assert slice_params(0, SIZES) == []


@pytest.mark.parametrize("num", [1, 2, 3, 4, 8, 16])
def test_slices_cover_every_param(num):
    for sizes in (SIZES, [2400, 32, 25600, 32, 51200, 64, 57600, 10], [7], [1, 1, 1]):
        out = slice_params(num, sizes)
        assert [sum(p) for p in out] == sizes
        assert len([x for p in out for x in p]) <= len(sizes) + num


def test_paramslicer_constant_as_derived_in_the_reference():
    sizes = [2400, 32, 25600, 32, 51200, 64, 57600, 10]
    assert slice_params(1, sizes) == [[s] for s in sizes]
    two = slice_params(2, sizes)
    assert two[4] == [40405, 10795]
    four = slice_params(4, sizes)
    assert four[4] == [6172, 34236, 10792] and four[6] == [23380, 34220]


def test_partition_slices():
    assert partition_slices(1, EIGHT) == [0] * 8
    assert partition_slices(2, EIGHT) == [0, 0, 0, 0, 1, 1, 1, 1]
    assert partition_slices(4, EIGHT) == [0, 0, 1, 1, 2, 2, 3, 3]
    assert partition_slices(8, EIGHT) == list(range(8))
    assert partition_slices(0, EIGHT) == []
