"""Split-K knob: config-level behaviour (no GPU, no DSL import)."""

from pygraph_gemm.kernels.config import GemmKnobs, can_implement, splitk_tiles, workspace_bytes


def _ci(m, n, k, knobs):
    return can_implement(m, n, k, 1, "bf16", "bf16", "bf16", (0, k, 1), (0, n, 1), (0, n, 1), knobs=knobs)


def test_split_k_default_has_no_workspace():
    assert GemmKnobs().split_k == 1
    assert workspace_bytes(128, 4096, 1, GemmKnobs(tile_m=64, tile_n=64)) == 0


def test_workspace_bytes_layout():
    kn = GemmKnobs(tile_m=128, tile_n=64, split_k=2)
    assert splitk_tiles(128, 4096, 1, kn) == 64
    assert workspace_bytes(128, 4096, 1, kn) == 64 * 2 * 128 * 64 * 4  # partials only
    # swap_ab works in the kernel frame; clusters pad the tile grid
    sw = GemmKnobs(tile_m=128, tile_n=16, swap_ab=True, split_k=4)
    assert splitk_tiles(16, 4096, 3, sw) == 32 * 1 * 3
    assert splitk_tiles(100, 100, 1, GemmKnobs(tile_m=128, tile_n=64, cga_n=4, split_k=2)) == 4


def test_can_implement_split_k():
    assert _ci(128, 4096, 4096, GemmKnobs(tile_m=128, tile_n=64, split_k=4)) is None
    assert _ci(128, 4096, 1000, GemmKnobs(tile_m=128, tile_n=64, split_k=3)) is None  # uneven slices ok
    why = _ci(128, 4096, 192, GemmKnobs(tile_m=128, tile_n=64, split_k=4))  # 3 K tiles < 4 slices
    assert why and "split_k" in why
    assert "split_k" in (GemmKnobs(split_k=32).validate() or "")
