"""The gemm rules and the persistent grid read the device's SM count: the same graph ranked and
compiled for the H200 (132 SMs) and for an H100 PCIe (114 SMs) gets each card's answer.

A wave is one CTA per SM, so the one-wave thresholds move with the SM count: the small bucket ends
at 128 x 256 x SMs outputs, the one-wave tile ladder fits the grid in SMs CTAs, the 4x1 cluster rule
in the 4-CTA clusters the card keeps resident."""

from __future__ import annotations

import pytest

import pygraph
from pygraph import data_type as dt
from pygraph import heur_mode
from pygraph.engines.base import REFERENCE_SM_COUNT, DeviceInfo, PlanConfig
from pygraph_gemm.analyzer import analyze
from pygraph_gemm.heuristics import recommend, shape_bucket, tile_rule
from pygraph_gemm.kernels.config import resident_for
from pygraph_gemm.kernels.torch_gemm import default_knobs

H200, H100_PCIE = 132, 114
BACKEND = [PlanConfig(-1), PlanConfig(7, {}, 0, heur_mode.A)]


def _graph(m, n, k, *, sm_count=None):
    g = pygraph.Graph(
        name="mm", io_data_type=dt.BFLOAT16, compute_data_type=dt.FLOAT, sm_version=90, sm_count=sm_count
    )
    a = g.tensor(name="A", dim=[m, k], data_type=dt.BFLOAT16)
    b = g.tensor(name="B", dim=[k, n], data_type=dt.BFLOAT16)
    g.matmul(a, b, compute_data_type=dt.FLOAT, name="mm").set_output(True)
    return g


def _first_sm90(m, n, k, sm_count):
    """gemm_sm90's first config in the plan list planning makes for a card of ``sm_count`` SMs."""
    g = _graph(m, n, k, sm_count=sm_count)
    g.create_execution_plans([heur_mode.A])
    assert g.engine_request().device.sms == sm_count
    first = next(p for p in g.plans if p.engine_id == 20400)
    return dict(first.knobs)


def test_the_reference_card_is_the_h200_the_rules_were_measured_on():
    assert REFERENCE_SM_COUNT == H200
    assert DeviceInfo().sms == H200 and DeviceInfo(sm=90, sm_count=H100_PCIE).sms == H100_PCIE


def test_the_one_wave_tile_is_the_biggest_grid_of_at_most_one_cta_per_sm():
    # 768x4096x4096: 6 x 22 = 132 CTAs of 128x192 fill the H200's wave; on 114 SMs they would run a
    # second wave, and 128x256's 6 x 16 = 96 CTAs are the biggest grid that fits one
    h200, pcie = _first_sm90(768, 4096, 4096, H200), _first_sm90(768, 4096, 4096, H100_PCIE)
    assert (h200["TILE_M"], h200["TILE_N"], h200["TILE_CGA_M"]) == (128, 192, 2)
    assert (pcie["TILE_M"], pcie["TILE_N"], pcie["TILE_CGA_M"]) == (128, 256, 2)


def test_the_small_bucket_ends_at_one_wave_of_128x256_tiles_of_the_device():
    # 1024 x 4096 = 4.19 M outputs: under 128 x 256 x 132 = 4.33 M, past 128 x 256 x 114 = 3.74 M
    facts = analyze(_graph(1024, 4096, 4096))
    assert shape_bucket(facts, sms=H200) == "small" and shape_bucket(facts, sms=H100_PCIE) == "large"
    # small: the one-wave rule's 128x256, numbered in plain order; large, long K: the GPC order
    assert tile_rule(facts, sms=H200)["PLACE_ORDER"] is False
    assert tile_rule(facts, sms=H100_PCIE)["PLACE_ORDER"] is True
    assert _first_sm90(1024, 4096, 4096, H200)["PLACE_ORDER"] is False
    assert _first_sm90(1024, 4096, 4096, H100_PCIE)["PLACE_ORDER"] is True


def test_the_backend_placement_follows_the_bucket_of_the_device():
    # bf16 kn plain: the backend was timed faster in the small cell, ours leads the large one
    facts = analyze(_graph(1024, 4096, 4096))
    on_h200 = recommend(
        [heur_mode.A], facts, {"gemm_sm90": 20400}, BACKEND, device=DeviceInfo(90, None, H200)
    )
    on_pcie = recommend(
        [heur_mode.A], facts, {"gemm_sm90": 20400}, BACKEND, device=DeviceInfo(90, None, H100_PCIE)
    )
    assert [p.engine_id for p in on_h200[:3]] == [-1, 7, 20400]
    assert [p.engine_id for p in on_pcie[:3]] == [20400, -1, 7]
    # no device known: the reference card's answer
    assert recommend([heur_mode.A], facts, {"gemm_sm90": 20400}, BACKEND) == on_h200


def test_the_four_row_cluster_fits_the_resident_clusters_of_the_device():
    # 256x3328x4096 on 64x128 tiles (one wave on both cards: 4 row tiles x 26 = 104 CTAs): 26 4-CTA
    # clusters fit the 30 the H200 keeps resident, not the 25 of 114 SMs (the same share of them)
    assert resident_for(H200, 4) == 30 and resident_for(H100_PCIE, 4) == 25
    facts = analyze(_graph(256, 3328, 4096))
    h200, pcie = tile_rule(facts, sms=H200), tile_rule(facts, sms=H100_PCIE)
    assert (h200["TILE_M"], h200["TILE_N"], h200["TILE_CGA_M"]) == (64, 128, 4)
    assert (pcie["TILE_M"], pcie["TILE_N"], pcie["TILE_CGA_M"]) == (64, 128, 2)


def test_an_odd_row_count_pairs_columns_where_padded_rows_pass_the_devices_wave():
    # 448x2048x4096 on 64x128 tiles: 7 row tiles x 16. Paired rows (8 x 16 = 128 CTAs) fit the
    # H200's wave; on 114 SMs they do not, and pairs of columns (7 x 16 = 112 CTAs) do
    facts = analyze(_graph(448, 2048, 4096))
    h200, pcie = tile_rule(facts, sms=H200), tile_rule(facts, sms=H100_PCIE)
    assert (h200["TILE_M"], h200["TILE_N"], h200["TILE_CGA_M"], h200["TILE_CGA_N"]) == (64, 128, 2, 1)
    assert (pcie["TILE_M"], pcie["TILE_N"], pcie["TILE_CGA_M"], pcie["TILE_CGA_N"]) == (64, 128, 1, 2)


@pytest.mark.parametrize(
    ("sm_count", "expected"),
    [
        (H200, {1: 132, 2: 66, 4: 30, 8: 14}),
        (H100_PCIE, {1: 114, 2: 57, 4: 25, 8: 12}),
        (1, {1: 1, 2: 1, 4: 1}),
    ],
)
def test_resident_clusters_without_asking_the_card(sm_count, expected):
    assert {size: resident_for(sm_count, size) for size in expected} == expected


def test_the_torch_entry_point_sizes_its_default_by_the_tensors_device():
    # the same one-wave boundary as the small bucket: 128x128 tiles under it, 128x256 2x1 past it
    assert (
        default_knobs(1024, 4096, 4096, 1, H200).tile_n,
        default_knobs(1024, 4096, 4096, 1, H200).cga_m,
    ) == (128, 1)
    past = default_knobs(1024, 4096, 4096, 1, H100_PCIE)
    assert (past.tile_n, past.cga_m) == (256, 2)
    assert default_knobs(1024, 4096, 4096) == default_knobs(1024, 4096, 4096, 1, REFERENCE_SM_COUNT)


# --- the persistent grid ---------------------------------------------------------------------------


def test_the_compile_key_holds_the_resident_clusters_of_the_card_planned_for(monkeypatch):
    pytest.importorskip("torch")
    from pygraph_gemm.kernels import compile_cache as cc
    from pygraph_gemm.kernels.config import EpilogueSpec, GemmKnobs, KernelEpilogue
    from pygraph_gemm.kernels.frame import kernel_layout

    monkeypatch.setattr(cc, "_RESIDENT", {})
    knobs = GemmKnobs(tile_m=128, tile_n=256, cga_m=2)
    epi = KernelEpilogue.from_spec(EpilogueSpec(), False)
    lay = kernel_layout(False, "bf16", "bf16", (0, 4096, 1), (0, 1, 4096), (0, 4096, 1), 4096, 4096, 4096, 1)
    # a card of another SM count than the GPU present (or no GPU): the table; 2-CTA clusters fill it
    assert cc.resident_clusters(2, H100_PCIE) == 57
    pcie, h200 = (
        cc.cache_key(knobs, epi, lay, sm_count=H100_PCIE),
        cc.cache_key(knobs, epi, lay, sm_count=H200),
    )
    assert pcie[-1] == 57 and pcie != h200
    # the SM count enters the key only through the grid it sizes: a card of 115 SMs also keeps 57
    # pairs resident, and shares the 114-SM card's kernel
    assert cc.cache_key(knobs, epi, lay, sm_count=H100_PCIE + 1) == pcie


def test_the_kernel_is_compiled_with_the_persistent_grid_of_the_card_planned_for(monkeypatch):
    pytest.importorskip("cutlass")
    from pygraph_gemm.kernels import compile_cache as cc
    from pygraph_gemm.kernels.config import EpilogueSpec, GemmKnobs, KernelEpilogue
    from pygraph_gemm.kernels.frame import kernel_layout

    monkeypatch.setattr(cc, "_RESIDENT", {})
    monkeypatch.setattr(cc, "compile_kernel", lambda kern, *a, **k: kern)  # the kernel object, uncompiled
    knobs = GemmKnobs(tile_m=128, tile_n=256, cga_m=2)
    epi = KernelEpilogue.from_spec(EpilogueSpec(), False)
    lay = kernel_layout(False, "bf16", "bf16", (0, 4096, 1), (0, 1, 4096), (0, 4096, 1), 4096, 4096, 4096, 1)
    kern = cc.compile_uncached(knobs, epi, lay, cc.ARCH, sm_count=H100_PCIE)
    assert kern.max_active_clusters == 57


def test_the_engine_builds_for_the_sm_count_of_the_request(monkeypatch):
    pytest.importorskip("cutlass")
    from pygraph_gemm.engines import sm90 as engine_sm90
    from pygraph_gemm.kernels import plan as launch_plan

    asked = []
    monkeypatch.setattr(launch_plan, "get_compiled", lambda *a, **k: asked.append(k) or (lambda *args: None))
    monkeypatch.setattr(engine_sm90.GemmSm90Engine, "_arch_reason", lambda self: None)
    g = _graph(768, 4096, 4096, sm_count=H100_PCIE)
    g.create_execution_plans([heur_mode.A])
    g.build_plans()
    assert g.selected_engine.name == "gemm_sm90"
    assert asked and asked[-1]["sm_count"] == H100_PCIE
