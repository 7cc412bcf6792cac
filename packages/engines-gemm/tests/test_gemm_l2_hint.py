"""L2 eviction hints of the SM90 kernel's copies (GemmKnobs.l2_hint): which copy gets which priority
(config level; no GPU, no DSL import). The device runs are check_gemm's l2_hint cases."""

import pytest

from pygraph_gemm.kernels.config import L2_EVICT_FIRST, L2_EVICT_LAST, GemmKnobs, l2_cache_hints

FIRST, LAST = L2_EVICT_FIRST, L2_EVICT_LAST


@pytest.mark.parametrize(
    "hint, raster, expected",
    [
        (0, "m", (None, None, None)),
        # rastering along M, the band's lines are cluster columns: B is read again every round
        (1, "m", (FIRST, LAST, None)),
        (2, "m", (None, LAST, None)),
        (3, "m", (FIRST, LAST, FIRST)),
        (4, "m", (None, None, FIRST)),
        # along N the band's lines are rows: A is kept
        (1, "n", (LAST, FIRST, None)),
        (2, "n", (LAST, None, None)),
        (3, "n", (LAST, FIRST, FIRST)),
    ],
)
def test_hints_follow_the_raster(hint, raster, expected):
    knobs = GemmKnobs(tile_m=128, tile_n=256, cga_m=2, swizzle=8, raster=raster, l2_hint=hint)
    assert knobs.validate() is None
    assert l2_cache_hints(knobs) == expected


def test_no_hint_by_default():
    assert l2_cache_hints(GemmKnobs()) == (None, None, None)


def test_unknown_hint_is_named():
    why = GemmKnobs(l2_hint=5).validate()
    assert why is not None and "l2_hint=5" in why
