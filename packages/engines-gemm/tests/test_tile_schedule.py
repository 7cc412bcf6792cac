"""The persistent tile schedule (kernels/tile_schedule.py): every work unit maps to one cluster of the
grid, each cluster exactly once, in compact bands; the kernel traces the same functions."""

from __future__ import annotations

import itertools

import pytest

from pygraph_gemm.kernels.config import GemmKnobs
from pygraph_gemm.kernels.tile_schedule import cta_tile, cta_work, placed_rank, schedule_extent, unit_coord


def _order(rows, cols, batches, swizzle, raster_m, serpentine=False):
    return [unit_coord(u, rows, cols, swizzle, raster_m, serpentine) for u in range(rows * cols * batches)]


@pytest.mark.parametrize(
    ("rows", "cols", "batches", "swizzle", "raster_m", "serpentine"),
    [
        (r, c, b, s, m, v)
        for r, c, b, s, m, v in itertools.product(
            (1, 3, 30), (1, 8, 33), (1, 2), (1, 4, 8), (True, False), (False, True)
        )
    ],
)
def test_every_cluster_of_the_grid_is_one_unit(rows, cols, batches, swizzle, raster_m, serpentine):
    order = _order(rows, cols, batches, swizzle, raster_m, serpentine)
    assert sorted(order) == sorted(itertools.product(range(rows), range(cols), range(batches)))


def test_serpentine_bands_start_where_the_band_before_ended():
    # 32 x 32 clusters (8192^3 in 128x256 tiles, 2x1 clusters), bands of 8 columns along M: band 1
    # walks the rows from the bottom, so its first units read the A rows band 0 read last
    order = _order(32, 32, 1, 8, True, serpentine=True)
    assert order[:8] == [(0, c, 0) for c in range(8)]
    assert order[248:256] == [(31, c, 0) for c in range(8)]  # band 0 ends on the last row
    assert order[256:264] == [(31, c, 0) for c in range(8, 16)]  # band 1 starts there
    assert order[504:512] == [(0, c, 0) for c in range(8, 16)]
    # unswizzled, every other line runs backward; along N the same holds for columns
    assert _order(3, 2, 1, 1, True, serpentine=True) == [
        (0, 0, 0),
        (1, 0, 0),
        (2, 0, 0),
        (2, 1, 0),
        (1, 1, 0),
        (0, 1, 0),
    ]
    order_n = _order(32, 32, 1, 8, False, serpentine=True)
    assert order_n[256:264] == [(r, 31, 0) for r in range(8, 16)]
    # each batch's grid starts its bands afresh
    assert _order(2, 2, 2, 1, True, serpentine=True)[4:] == [(0, 0, 1), (1, 0, 1), (1, 1, 1), (0, 1, 1)]


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


def test_cta_work_split_k_slices_cover_k_once():
    # split-K 3 rides on the L mode: units of one tile, in L order, are its three K slices
    knobs = GemmKnobs(tile_m=128, tile_n=64, split_k=3)
    rows, cols, k_tiles = 2, 3, 10
    for tile in range(rows * cols):
        covered = []
        for ks in range(3):
            unit = ks * rows * cols + tile  # L index ks of batch 0
            _, _, batch, kt0, n_kt, got_ks, slices, _ = cta_work(knobs, unit, rows, cols, (0, 0), k_tiles)
            assert (batch, got_ks, slices) == (0, ks, 3)
            covered += range(kt0, kt0 + n_kt)
        assert covered == list(range(k_tiles))


def test_cta_work_whole_tile_without_slices():
    knobs = GemmKnobs(tile_m=128, tile_n=256, cga_m=2, swizzle=8)
    row, col, batch, kt0, n_kt, ks, slices, slot = cta_work(knobs, 5, 4, 3, (1, 0), 7)
    assert (row, col, batch) == cta_tile(knobs, 5, 4, 3, (1, 0))
    assert (kt0, n_kt, ks, slices, slot) == (0, 7, 0, 1, 0)


# The H200's GPCs as a probe read them (scripts/device/gpc_map.cu, in git at fba67cc5e32e): the SMs
# each 16-CTA cluster held, by GPC; GPC 0 (SMs 0, 1, 16, 17, 32, 33, 48, 49) and SMs 120-131 never
# held one.
_GPC_OF_SM = {
    sm: gpc
    for gpc, sms in enumerate(
        [
            (0, 1, 16, 17, 32, 33, 48, 49),
            (2, 3, 18, 19, 34, 35, 50, 51, 64, 65, 78, 79, 92, 93, 106, 107),
            (4, 5, 20, 21, 36, 37, 52, 53, 66, 67, 80, 81, 94, 95, 108, 109),
            (6, 7, 22, 23, 38, 39, 54, 55, 68, 69, 82, 83, 96, 97, 110, 111),
            (8, 9, 24, 25, 40, 41, 56, 57, 70, 71, 84, 85, 98, 99, 112, 113),
            (10, 11, 26, 27, 42, 43, 58, 59, 72, 73, 86, 87, 100, 101, 114, 115),
            (12, 13, 28, 29, 44, 45, 60, 61, 74, 75, 88, 89, 102, 103, 116, 117),
            (14, 15, 30, 31, 46, 47, 62, 63, 76, 77, 90, 91, 104, 105, 118, 119),
        ]
    )
    for sm in sms
}


def _first_sm(c):
    """SM of cluster c's first CTA as a probe saw a full grid placed (tile_schedule's placement order)."""
    return 2 * (c - 4) if c >= 4 else 124 + 2 * c


@pytest.mark.parametrize("resident", range(1, 67))
def test_placed_rank_is_a_permutation_of_the_resident_clusters(resident):
    assert sorted(placed_rank(c, resident) for c in range(resident)) == list(range(resident))


@pytest.mark.parametrize("resident", [64, 66])
def test_placed_rank_runs_eight_consecutive_units_on_one_gpc(resident):
    cluster_of = {placed_rank(c, resident): c for c in range(resident)}
    for run in range(7):
        gpcs = {_GPC_OF_SM[_first_sm(cluster_of[u])] for u in range(8 * run, 8 * run + 8)}
        assert gpcs == {run + 1}
    assert {_GPC_OF_SM[_first_sm(cluster_of[u])] for u in range(56, 60)} == {0}


@pytest.mark.parametrize("resident", [1, 30, 48, 63, 65])
def test_placed_rank_leaves_other_grids_in_order(resident):
    assert [placed_rank(c, resident) for c in range(resident)] == list(range(resident))


def test_place_order_needs_a_two_cta_cluster():
    assert GemmKnobs(tile_m=64, tile_n=128, cga_m=2, place_order=True).validate() is None
    assert GemmKnobs(tile_m=64, tile_n=128, cga_n=2, place_order=True).validate() is None
    for cm, cn in ((1, 1), (4, 1), (2, 2)):
        reason = GemmKnobs(tile_m=64, tile_n=128, cga_m=cm, cga_n=cn, place_order=True).validate()
        assert reason is not None and f"{cm}x{cn}" in reason
