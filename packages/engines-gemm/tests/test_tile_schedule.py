"""The persistent tile schedule (kernels/tile_schedule.py): every work unit maps to one cluster of the
grid, each cluster exactly once, in compact bands; the kernel traces the same functions."""

from __future__ import annotations

import itertools

import pytest

from pygraph_gemm.kernels.tile_schedule import schedule_extent, unit_coord


def _order(rows, cols, batches, swizzle, raster_m):
    return [unit_coord(u, rows, cols, swizzle, raster_m) for u in range(rows * cols * batches)]


@pytest.mark.parametrize(
    ("rows", "cols", "batches", "swizzle", "raster_m"),
    [
        (r, c, b, s, m)
        for r, c, b, s, m in itertools.product((1, 3, 30), (1, 8, 33), (1, 2), (1, 4, 8), (True, False))
    ],
)
def test_every_cluster_of_the_grid_is_one_unit(rows, cols, batches, swizzle, raster_m):
    order = _order(rows, cols, batches, swizzle, raster_m)
    assert sorted(order) == sorted(itertools.product(range(rows), range(cols), range(batches)))


def test_plain_raster_walks_rows_first_along_m_and_columns_first_along_n():
    assert _order(3, 2, 1, 1, True) == [(0, 0, 0), (1, 0, 0), (2, 0, 0), (0, 1, 0), (1, 1, 0), (2, 1, 0)]
    assert _order(2, 3, 1, 1, False) == [(0, 0, 0), (0, 1, 0), (0, 2, 0), (1, 0, 0), (1, 1, 0), (1, 2, 0)]


def test_swizzle_walks_bands_and_the_last_band_is_only_as_wide_as_what_is_left():
    # 30 x 33 clusters (7680x8448 in 128x256 tiles, 2x1 clusters), bands of 8 columns: the last band
    # is 1 column wide, so the 990 units are exactly the 990 clusters (a band padded to 8 would
    # walk 1200 units, 210 of them outside the grid)
    order = _order(30, 33, 1, 8, True)
    assert len(order) == 990
    assert order[:9] == [(0, c, 0) for c in range(8)] + [(1, 0, 0)]
    assert order[-30:] == [(r, 32, 0) for r in range(30)]
    # 66 resident clusters at once cover a compact block: 9 rows of one 8-column band
    first_wave = order[:66]
    assert {c for _, c, _ in first_wave} == set(range(8))
    assert max(r for r, _, _ in first_wave) == 8
    # rastering along N is the transpose: bands of 8 rows, down the band first, then along N
    order_n = _order(33, 30, 1, 8, False)
    assert order_n[:9] == [(r, 0, 0) for r in range(8)] + [(0, 1, 0)]
    assert order_n[-30:] == [(32, c, 0) for c in range(30)]


def test_extent_counts_clusters_and_caps_the_grid_at_the_resident_count():
    assert schedule_extent((61, 33, 1), (2, 1), 66) == (31, 33, 1023, 66)  # odd tile rows: padded cluster
    assert schedule_extent((3, 2, 2), (1, 2), 66) == (3, 1, 6, 6)
