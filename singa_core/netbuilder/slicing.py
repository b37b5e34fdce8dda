"""Param slicing for parameter servers (SINGA 0.3 §4.1: ``Slice`` and ``PartitionSlices``
in src/utils/common.cc).

With ``num = lcm(nservers_per_group, nserver_groups)`` boxes, :func:`slice_params` cuts the
owner Params (sizes in param-id order) into slices of roughly equal size: the box capacity
is ``avg = total/num + total%num`` and the tolerance ``diff = avg/10``; a Param that fits in
the current box goes in whole; one that overflows it by at most ``diff`` also goes in whole
and closes the box; otherwise, if the box still has at least ``diff`` room, the Param is cut
there and the rest continues in new boxes; else a new box is opened. Slices are numbered
0, 1, 2, … in the order they come out. :func:`partition_slices` places those slices on ``k``
servers (or server groups) with the same greedy rule. Both reproduce the C++ test vectors of
0.3's test_common.cc exactly (tests/core/test_slicing.py).
"""

from __future__ import annotations


def slice_params(num: int, sizes: list[int]) -> list[list[int]]:
    """Slice sizes per Param (``sizes`` in param-id order) for ``num`` boxes; ``num`` ≤ 0
    gives an empty list, as 0.3."""
    if num <= 0:
        return []
    avg = sum(sizes) // num + sum(sizes) % num
    diff = avg // 10
    room, opened = avg, 0  # room left in the current box; boxes opened after the first
    out: list[list[int]] = []
    for size in sizes:
        pieces, left = [], size
        while left > 0:
            if left <= room:  # fits
                pieces.append(left)
                room -= left
                left = 0
            elif left <= room + diff:  # a little too big: take it whole, the box is full
                pieces.append(left)
                room, left = 0, 0
            elif room >= diff:  # cut what fits, go on in a new box
                pieces.append(room)
                left -= room
                room, opened = avg, opened + 1
            else:  # too little room to bother: a new box
                room, opened = avg, opened + 1
        out.append(pieces)
    if opened > num:
        raise ValueError(f"slicing params of sizes {sizes} needed more than {num} boxes")
    return out


def partition_slices(num: int, slice_sizes: list[int]) -> list[int]:
    """The box (server, or server group) of each slice, for ``num`` boxes (same rule)."""
    if num <= 0:
        return []
    avg = sum(slice_sizes) // num + sum(slice_sizes) % num
    diff = avg // 10
    room, box = avg, 0
    out: list[int] = []
    k = 0
    while k < len(slice_sizes):
        size = slice_sizes[k]
        if size <= room:
            room -= size
        elif size <= room + diff:
            room = 0
        else:  # the next box; the same slice is placed there
            room, box = avg, box + 1
            continue
        out.append(box)
        k += 1
    return out
