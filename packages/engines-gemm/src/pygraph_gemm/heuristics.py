"""The ``gemm`` family's ranking hook: one named config per shape bucket, the rest of the domain behind it.

Rules read the facts and the device's SM count (``device.sms``): a wave is one CTA per SM of the
device the graph is planned for, so "one wave" thresholds are multiples of it, measured on the
H200's 132 SMs (`pygraph.engines.base.REFERENCE_SM_COUNT`). Placement against the backend is a
measurement: a cell where the backend was timed faster follows it (`_BACKEND_LEADS`;
benchmarks.gemm.placement_gemm times every cell); an untimed cell keeps the default order (ours
first), and says so below.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from math import prod
from typing import Any

from pygraph.engines.base import REFERENCE_SM_COUNT, DeviceInfo, PlanConfig, knobs_key
from pygraph.engines.heuristics import PLACE_BACKEND, Deferred, assemble
from pygraph.ir.dtypes import heur_mode
from pygraph_gemm.analyzer import GemmFacts
from pygraph_gemm.engines.sm80 import KNOB_DOMAINS as SM80_KNOB_DOMAINS
from pygraph_gemm.engines.sm90 import KNOB_DOMAINS, knobs_from_config
from pygraph_gemm.kernels.config import ceil_div, padded, resident_for
from pygraph_gemm.kernels.tile_schedule import placed_rank
from pygraph_gemm.support import dtype_short

__all__ = ["recommend", "shape_bucket", "sm80_tile_rule", "tile_rule"]

# (input dtype, A/B majors, bucket, epilogue) cells where the backend's plan was timed faster than
# gemm_sm90's first config on the H200, both through graph.execute(): benchmarks.gemm.placement_gemm
# (cold L2, paired rounds; the backend faster in 3 of 4 of them; benchmarks/RESULTS.md, GEMM,
# History: the one-wave rule's backend placement timed in all 64 cells, and the 4x1 clusters' run).
# - skinny (16x4096x4096): plain in the layouts with a column-major operand
#   (0.94-0.98x; kk bf16 0.99x stays ours).
# - narrow and small, plain, every layout and dtype: the backend led at 1024x4096x4096 in kn, mk, mn
#   (0.98-0.99x) and at 128x4096x4096 in bf16 mn (0.96x); at 256x8192x2048 in all
#   eight cells (0.88-0.96x) and at 1024x1024x4096 in all eight (0.85-0.94x).
#   The cells ours won were level (1024x4096x4096 kk 1.00x, 768x4096x4096 0.99-1.01x, 128x4096x4096
#   0.99-1.01x), so the backend goes first in all of them.
# Every fused cell is ours (1.09-1.42x at those shapes; mk at 1024x1024x4096 0.98x is the one loss,
# against 1.20-1.39x at the other two small shapes), and every large cell (plain 1.00x, fused
# 1.12-1.20x).
_BACKEND_LEADS: frozenset[tuple[str, str, str, str]] = frozenset(
    {
        (dt, ab, "skinny", "plain")
        for dt, ab in (("bf16", "mk"), ("bf16", "mn"), ("fp16", "kk"), ("fp16", "mk"), ("fp16", "mn"))
    }
    | {
        (dt, ab, bucket, "plain")
        for dt in ("bf16", "fp16")
        for ab in ("kk", "kn", "mk", "mn")
        for bucket in ("narrow", "small")
    }
)

# cluster rows a one-wave 64x128 grid needs before the wave rule numbers it GPC by GPC: eight rows
# (1024x1024x4096) ran +14% numbered, two (256x4096x4096) 0.99
_PLACED_MIN_ROWS = 8


def shape_bucket(facts: GemmFacts, *, sms: int = REFERENCE_SM_COUNT) -> str:
    """skinny: M <= 32 (swap A and B so N fills the tile's M); narrow: M <= 256; small: at most one
    wave of 128x256 tiles on ``sms`` SMs (the device's, `DeviceInfo.sms`); large: the rest."""
    batch = prod(facts.batch)
    if facts.m <= 32 and facts.n >= 256:
        return "skinny"
    if facts.m <= 256:
        return "narrow"
    if facts.m * facts.n * batch <= 128 * 256 * sms:
        return "small"
    return "large"


# Cooperative 128x256 in a 2x1 cluster, swizzle 8, warpgroups 2 k-blocks apart, serpentine bands
# with every other tile's k-blocks flipped: the long-K rule (tile_rule says what each was measured at).
_LONG_K: dict[str, Any] = {
    "TILE_M": 128,
    "TILE_N": 256,
    "TILE_CGA_M": 2,
    "SWIZZLE": 8,
    "STAGGER": 2,
    "SERPENTINE": True,
    "K_FLIP": True,
}


# Tiles the one-wave rule picks from, the largest first (ties go to the earlier one): 64-row tiles
# lose less to a ragged M than 128-row ones, so 64x128 comes before 128x64, which is left out
# (256x4096x4096 bf16: 64x128 in a 2x1 cluster 362 TFLOP/s, 128x64 339).
_WAVE_LADDER = ((128, 256), (128, 192), (128, 128), (64, 128), (64, 64))


def _launched_ctas(facts: GemmFacts, tile_m: int, tile_n: int, sms: int) -> tuple[int, int, int]:
    """(CTAs the persistent grid runs for one output tile each, the cluster's M and N extents): pairs
    of row tiles share B in a 2x1 cluster whenever there are two row tiles, an odd count padded by one.
    Where that padding alone pushes a tile of up to 128 columns past one wave (``sms`` CTAs: 2-CTA
    clusters fill every SM, as the occupancy query placed 66 pairs on 132 SMs), pairs of column tiles
    share A in a 1x2 cluster instead (no cluster when that does not fit either): 640x3000x4096, five
    row tiles of 128x128, runs 120 CTAs in 1x2 clusters at 493 TFLOP/s bias+gelu, 482 with none,
    against 419 for the 96 CTAs of 128x192 that padding to six rows left (bf16, H200)."""
    rows, cols, batch = ceil_div(facts.m, tile_m), ceil_div(facts.n, tile_n), prod(facts.batch)
    if rows < 2:
        return cols * batch, 1, 1
    paired_rows = padded(rows, 2) * cols * batch
    if paired_rows <= sms or rows % 2 == 0 or tile_n > 128:
        return paired_rows, 2, 1
    paired_cols = rows * padded(cols, 2) * batch
    if cols >= 2 and paired_cols <= sms:
        return paired_cols, 1, 2
    if rows * cols * batch <= sms:
        return rows * cols * batch, 1, 1
    return paired_rows, 2, 1


def _wave_tiles(facts: GemmFacts, sms: int) -> dict[str, Any]:
    """M <= 256, or at most one wave of 128x256 tiles: the ladder's tile that puts the most CTAs to
    work while they all fit one wave of the device's ``sms`` SMs; K never split.

    The grid takes about (waves x one tile's time), so one wave of the biggest tile that still fills
    the SMs beats both a half-empty wave of bigger tiles and two waves of smaller ones. Paired
    cold-L2 rounds on the H200's 132 SMs (scripts/device/narrow_gemm.sh, bf16, plain / bias+gelu
    TFLOP/s; benchmarks/RESULTS.md, GEMM, History: the one-wave rule):
    - 128x256 (the long-K rule's config): 1024x4096x4096 735 / 714 (128x128 tiles, the old small
      rule, 575 / 561; cuBLAS 742, cuBLASLt fused 715), 2048x2048x2048 634 / 604, 512x8192x1024
      478 / 444, 256x16384x4096 650 / 630 (128x128 567 / 552), 1100x3000x4096 (120 CTAs) 577 / 562.
    - 128x192 (the same config, 192 columns; the last column tile may run part empty):
      768x4096x4096 684 / 668 against 571 / 553 for 128x256 (96 CTAs; cuBLAS 687, cuBLASLt fused
      655), 512x6144x4096 663 / 643, 1536x2048x4096 689 / 672, 256x12288x4096 621 / 611 (all
      +19-21% over 128x256; cooperative without the order knobs 2-10% behind). Sustained
      (~1 s of launches per column) the gain is +12%: 768x4096x4096 bias+gelu 589 against 524.
    - 128x128: 1024x2048x4096 600 / 583 (128x256 384 / 376), 256x8192x2048 409 / 384 (128x64,
      the old narrow rule past a wave, 346 / 331), 128x14336x4096 354 / 348 (one row tile: no
      cluster; 128x64 327 / 325).
    - 64x128: 256x4096x4096 362 / 355 (128x64 339 / 336), 200x3000x4104 189 / 190 (144 / 142),
      1024x1024x4096 411 / 398 (128x64 339 / 335, 128x128 split-K 2 377 / 367; cuBLAS 474,
      cuBLASLt fused 447).
    - 64x64: 128x4096x4096 224-226 bias+gelu, against 205 for 128x64
      split-K 2 and cuBLASLt's fused 215.
    M <= 64 runs 64x64 alone (one row tile; 64x4096x4096 119 against 102 in a cluster that would
    idle its second CTA). Past one wave there (64x16384x4096) 64x128 reads level, 189 against 190:
    with one row tile the grid streams B from DRAM whatever the tile. With no
    tile fitting one wave, the fewest waves, ties to the bigger tile. Clusters: `_launched_ctas`
    (rows paired, else columns) and `_fits_four_row_cluster` (64x128 in a 4x1 cluster)."""
    if facts.m <= 64:
        return {"TILE_M": 64, "TILE_N": 64}
    # (CTAs, cluster M, cluster N, tile_m, tile_n) per rung; max and min keep the first (bigger) tile
    # on a tie
    rungs = [(*_launched_ctas(facts, tm, tn, sms), tm, tn) for tm, tn in _WAVE_LADDER]
    one_wave = [r for r in rungs if r[0] <= sms]
    if one_wave:
        ctas, cga_m, cga_n, tile_m, tile_n = max(one_wave, key=lambda r: r[0])
    else:
        ctas, cga_m, cga_n, tile_m, tile_n = min(rungs, key=lambda r: ceil_div(r[0], sms))
    if tile_m == 128 and tile_n >= 192:
        return {**_LONG_K, "TILE_N": tile_n, "TILE_CGA_M": cga_m}
    if (tile_m, tile_n, cga_m) == (64, 128, 2) and _fits_four_row_cluster(facts, tile_n, sms):
        cga_m = 4
    wave = {"TILE_M": tile_m, "TILE_N": tile_n, "TILE_CGA_M": cga_m, "TILE_CGA_N": cga_n}
    if (
        (tile_m, tile_n, cga_m, cga_n) == (64, 128, 2, 1)
        and ceil_div(facts.m, tile_m * cga_m) >= _PLACED_MIN_ROWS
        and _reordered(ctas // 2)
    ):
        # one wave of clusters `placed_rank` numbers GPC by GPC, eight cluster rows or more: rastered
        # along N, each GPC's eight clusters run one row of tiles and share its A tiles (PLACE_ORDER).
        # 1024x1024x4096 bf16 plain 476-478 TFLOP/s against 417-418, bias+gelu 468-469 against
        # 408-410 (cuBLAS mm 489-493, cuBLASLt fused 467); two cluster rows (256x4096x4096) read
        # 0.99 and keep the plain order (narrow_gemm.sh, 15 cold-L2 rounds).
        return {**wave, "RASTER": "n", "PLACE_ORDER": True}
    return wave


def _reordered(clusters: int) -> bool:
    """Whether `tile_schedule.placed_rank` renumbers a grid of ``clusters`` resident clusters (it is
    the identity on grids whose placement was not read: the H200's full grid and its one-wave 8x8
    grid of 2-CTA clusters, so never on a card of fewer SMs, whose one wave holds fewer)."""
    return any(placed_rank(c, clusters) != c for c in range(clusters))


def _fits_four_row_cluster(facts: GemmFacts, tile_n: int, sms: int) -> bool:
    """64-row tiles read 1.5x the operand bytes per FLOP of 128-row ones, so their grid waits on the
    L2; a 4x1 cluster multicasts each B tile to four row tiles instead of two (12 KB instead of 16
    KB from L2 per CTA per 64x128 k-block). Taken when it pads no more row tiles than the 2x1 cluster
    does (3, 4, 7, 8.. row tiles) and the grid still fits one wave of 4-CTA clusters on ``sms`` SMs
    (`kernels.config.resident_for`: 30 resident, 120 CTAs, on the H200's 132). Paired cold-L2 rounds
    (narrow_gemm.sh, 64x128 tiles, bias+gelu
    TFLOP/s, 4x1 against 2x1): 200x3000x4104 218 against 187 bf16 (+16%), 218 against 189 fp16;
    150x3000x4104 167 against 148 (+13%). 2x2 clusters move the same bytes and read 212 at
    200x3000x4104; on 128-row tiles (1100x3000x4096 128x256, 640x3000x4096 128x192) they are level.
    512x1920x4096 (120 CTAs) +1.8%; 256x4096x4096 (128 CTAs, 32 clusters) 0.72: past 30 clusters
    the grid runs a second wave."""
    rows = ceil_div(facts.m, 64)
    if rows < 3 or padded(rows, 4) != padded(rows, 2):
        return False
    ctas = padded(rows, 4) * ceil_div(facts.n, tile_n) * prod(facts.batch)
    return ctas <= resident_for(sms, 4) * 4


def tile_rule(facts: GemmFacts, *, sms: int = REFERENCE_SM_COUNT) -> dict[str, Any]:
    """The config named first for the graph's bucket on a device of ``sms`` SMs (`DeviceInfo.sms`).

    From the kernel's sweeps on the H200 (bf16 and fp16 alike; docs/gemm.md has the measurements):
    large shapes 128x256 cooperative with a 2x1 cluster, swizzle 8 and warpgroups 2 k-blocks apart,
    ping-pong 128x128 when K <= 1024; M <= 256 or at most one wave of 128x256 tiles: the biggest tile
    that fills one wave (`_wave_tiles`); M=16 swapped 64x16 (1.04-1.05x cuBLAS).
    """
    bucket = shape_bucket(facts, sms=sms)
    base = {
        "TILEK": 64,
        "STAGES": 0,
        "RASTER": "m",
        "SWIZZLE": 1,
        "TILE_CGA_N": 1,
        "SWAP_AB": False,
        "TILE_CGA_M": 1,
        "SPLIT_K": 1,
        "PINGPONG": False,
        "STAGGER": 0,
        "SERPENTINE": False,
        "K_FLIP": False,
        "PLACE_ORDER": False,
    }
    if bucket == "skinny":
        return {**base, "TILE_M": 64, "TILE_N": 16, "SWAP_AB": True}
    if bucket in ("narrow", "small"):
        return {**base, **_wave_tiles(facts, sms)}
    if facts.k <= 1024:
        # short K: the epilogue is a large share of each tile, and ping-pong runs it under the other
        # warpgroup's main loop. 8192x8192x1024: 128x128 ping-pong 2x1 cluster plain
        # 654/644 vs 644/613 cooperative 128x256 (bf16/fp16 TFLOP/s), bias+gelu 644/597 vs 582/558.
        return {**base, "TILE_M": 128, "TILE_N": 128, "TILE_CGA_M": 2, "PINGPONG": True}
    # long K: cooperative 128x256, 2x1 cluster, swizzle 8 (bf16, 5 interleaved rounds;
    # benchmarks/RESULTS.md, GEMM, History: swizzle 8 and the kernel's own tile schedule): 8192^3
    # plain 682 / bias+gelu 667 TFLOP/s vs 667 / 652 with swizzle 4 and 637 / 651 without (DRAM
    # reads 1.22 vs 2.34 GB, SM clock 1.55 vs 1.50 GHz under ncu);
    # 16384x4096x4096 660 / 649, ahead of the 1x2 cluster rastered along N named before for tall
    # shapes (638 / 619 with swizzle 8 in the same run; 661 / 637 without, in the run before).
    # Warpgroups 2 k-blocks apart (STAGGER): in paired A/Bs of 41 rounds (benchmarks.gemm.ab_gemm,
    # bf16) bias+gelu +0.6% at 8192^3 and 16384x4096x4096, +0.9% at 4096x14336x4096, plain +0.1-0.6%;
    # under ncu at one clock 0.9-1.8% fewer cycles. The sweep losses that had kept it behind were noise
    # of single timings. Sustained (~1 s per column per round) it is level with lockstep (+0.0-0.6%).
    # Ping-pong 128x128 z8 won bursts of 10 launches here by 1-4% and lost sustained runs by 2-5%
    # (the H200 is power-capped): a rule is decided from sustained runs (scripts/device/floor_gemm.sh).
    # Serpentine bands and every other tile's k-blocks flipped: the same work ordered so each
    # round of the persistent grid starts on the L2 lines the round before it read last. Sustained
    # bias+gelu, 3 rounds of ~1 s per column (scripts/device/floor_gemm.sh): bf16
    # +0.6% 4096^3, +0.6% 8192^3, +0.7% 4096x14336x4096, +1.0% 16384x4096x4096; fp16 +0.6, +0.5,
    # +0.9, +0.7%. DRAM reads under ncu: 8192^3 1.23 -> 1.07 GB, 4096x14336x4096 0.58 -> 0.43 GB.
    # Raster N with the same order: +0.2..+0.6% in 9 of 12 cells of one run, 0.998-1.004
    # in another (bf16): level within the runs' spread, so the rule keeps rastering along M.
    # Clusters numbered GPC by GPC (PLACE_ORDER): with swizzle 8 along M, eight consecutive
    # units are one row of the band, so each GPC's clusters share their A tiles and the L2 request
    # coalescer merges those reads (8192^3, numbered by 4-TPC SM groups: 4.0 M -> 24.8 M merged
    # sectors, 265 -> 239 M L2 reads). Sustained bias+gelu against the same config without it
    # (floor_gemm.sh): SM groups bf16 +0.6% 4096^3, +0.7% 8192^3, +0.5%
    # 4096x14336x4096, +0.4% 16384x4096x4096, fp16 +1.0, +0.7, +0.7, +0.6%; whole GPCs at 8192^3
    # +1.2% bf16 (1.054 x unfused) and +1.0% fp16 (1.053).
    return {**base, **_LONG_K, "PLACE_ORDER": True}


def _valid(knobs: dict[str, Any]) -> bool:
    if knobs_from_config(knobs).validate() is not None:
        return False  # a combination the kernel cannot build (GemmKnobs.validate says which)
    if knobs["TILE_CGA_M"] * knobs["TILE_CGA_N"] > 4:
        # 8-CTA clusters build (kernel-only) but timed level to +3% against 4x1: not in the domain
        return False
    # Split-K pays where few output tiles leave SMs idle: clusters and swapped operands only dilute it.
    return knobs["SPLIT_K"] == 1 or (knobs["TILE_CGA_M"] == knobs["TILE_CGA_N"] == 1 and not knobs["SWAP_AB"])


@functools.cache
def _domain() -> tuple[dict[str, Any], ...]:
    """Every valid point of the knob domain (fixed per process: built once)."""
    # The L2-order knobs only reorder the same work: validate the rest once, then take each valid
    # point with every setting of theirs; PLACE_ORDER needs its own check (2-CTA clusters only).
    order_axes = ("SERPENTINE", "K_FLIP", "PLACE_ORDER")
    rest = {a: d for a, d in KNOB_DOMAINS.items() if a not in order_axes}
    orders = _points({a: KNOB_DOMAINS[a] for a in order_axes})
    return tuple(
        dict(sorted({**k, **o}.items()))
        for k in _points(rest)
        if _valid(k)
        for o in orders
        if not o["PLACE_ORDER"] or _valid({**k, **o})
    )


@functools.cache
def _domain_configs(engine_id: int) -> tuple[PlanConfig, ...]:
    """The domain as plan-list entries of one engine id, built once: building thousands of them per
    plan list cost ~40 ms a call."""
    return tuple(PlanConfig(engine_id, k) for k in _domain())


def _points(domains: dict[str, tuple[Any, ...]]) -> list[dict[str, Any]]:
    axes = sorted(domains)
    return [dict(zip(axes, point, strict=True)) for point in itertools.product(*(domains[a] for a in axes))]


def sm80_tile_rule(facts: GemmFacts, *, sms: int = REFERENCE_SM_COUNT) -> dict[str, Any]:
    """gemm_sm80's first config: from benchmarks.gemm.bench_gemm_sm80 on the H200 (bf16, kernel built
    for sm_90; benchmarks/RESULTS.md, GEMM: gemm_sm80, the portable slot): 128x128x32 on the large
    shapes (372-376 TFLOP/s at 8192^3, 0.53-0.55x cuBLAS; 128x128x64 362, 64x128x64 289-306, 64x64x32
    214); 64x128x64 when M <= 256 (98-103 TFLOP/s at 128x4096x4096 vs 68-81 for 128x128 tiles; 13-14
    at M=16). The buckets it reads (skinny, narrow) do not depend on ``sms``."""
    if shape_bucket(facts, sms=sms) in ("skinny", "narrow"):
        return {"TILE_M": 64, "TILE_N": 128, "TILEK": 64, "STAGES": 0, "SWAP_AB": False}
    return {"TILE_M": 128, "TILE_N": 128, "TILEK": 32, "STAGES": 0, "SWAP_AB": False}


def _sm80_entries(engine_id: int | None, facts: GemmFacts, sms: int) -> list[PlanConfig]:
    """gemm_sm80's configs, its rule first; none when the slot is not offered (it is opt-in)."""
    if engine_id is None:
        return []
    first = sm80_tile_rule(facts, sms=sms)
    return [PlanConfig(engine_id, first)] + [
        PlanConfig(engine_id, k) for k in _points(SM80_KNOB_DOMAINS) if k != first
    ]


def recommend(
    modes: Sequence[Any],
    facts: GemmFacts,
    offered: dict[str, int],
    backend_entries: Sequence[PlanConfig],
    *,
    device: DeviceInfo | None = None,
) -> list[PlanConfig]:
    """The plan list for a graph planned for ``device`` (None: nothing known, the reference card's
    SM count): its bucket's config first, the backend's block where the cell's timing put it."""
    sms = (device or DeviceInfo()).sms
    # gemm_sm80 (opt-in, portable) ran at 0.3-0.55x cuBLAS on the H200 in every measured cell: it
    # goes behind the backend, and behind every gemm_sm90 config
    sm80 = _sm80_entries(offered.get("gemm_sm80"), facts, sms)
    engine_id = offered.get("gemm_sm90")
    if engine_id is None:
        return assemble(modes, lambda kind: [PLACE_BACKEND, *(sm80[:1] if kind is heur_mode.FALLBACK else sm80)],
                        backend_entries)  # fmt: skip
    first = tile_rule(facts, sms=sms)
    epilogue = "fused" if facts.steps else "plain"
    bucket = shape_bucket(facts, sms=sms)
    cell = (dtype_short(facts.a.data_type), f"{facts.a_major}{facts.b_major}", bucket, epilogue)
    first_key = (engine_id, knobs_key(first))
    # the rest of the domain (12,096 configs) is built only when the plan list is read past its
    # ranked prefix: making it is most of a first plan list's cost, and a graph runs one of the first
    behind = Deferred(engine_id, lambda: [p for p in _domain_configs(engine_id) if p.key != first_key])

    def propose(kind: Any) -> list[PlanConfig]:
        if kind is heur_mode.FALLBACK:
            safe = {
                **first,
                "TILE_N": min(first["TILE_N"], 128),
                "TILE_CGA_M": 1,
                "TILE_CGA_N": 1,
                "SPLIT_K": 1,
                "STAGGER": 0,
                "SERPENTINE": False,
                "K_FLIP": False,
                "PLACE_ORDER": False,
            }
            return [PlanConfig(engine_id, safe), PLACE_BACKEND, *sm80[:1]]
        ours = [PlanConfig(engine_id, first)]
        if cell in _BACKEND_LEADS:
            return [PLACE_BACKEND, *ours, behind, *sm80]
        return [*ours, PLACE_BACKEND, behind, *sm80]

    return assemble(modes, propose, backend_entries)
