"""The ``gdn``, ``kda`` and ``gdn2`` families' ranking hook.

``gdn``: ``gdn_cutile`` (the forward), ``gdn_cutile_bwd`` (the backward), ``gdn_sm90`` and
``gdn_sm90_bwd`` (the CuTe DSL forward and backward, SM90 only). On the forward gdn_sm90's plans
lead (its fused warpgroup scan, segmented for a few long sequences, measured fastest in every timed
cell: `sm90_order`), then gdn_cutile's. gdn_cutile's block: first OCCUPANCY=2 (two CTAs per SM on the per-chunk kernels, the
measured fastest) at BLOCK_V 32 for the forward and the hook's BLOCK_V for the backward, then every
BLOCK_V that tiles the value head dim at the compiler's occupancy (the hook's first), then,
untimed, for autotune: the forward's other BLOCK_V values at OCCUPANCY=2, the other hints, and the
first entry with each SEGMENT (the split scans). On the backward gdn_sm90_bwd's plans come before
gdn_cutile_bwd's in the cells where they measured faster (a scan grid under the SMs or past two
CTAs per SM) and after them elsewhere. The SM count is the device's (``device.sms``, the
`pygraph.engines.base.DeviceInfo` the graph is planned for): every grid rule below is stated as a
fraction or multiple of it, measured on the H200's 132 SMs. No backend lowers
these ops, so the backend's block is empty; it keeps its place after ours. ``kda`` and ``gdn2``:
their CuTe DSL forwards (``kda_sm90``, ``gdn2_sm90``) or backwards (``*_sm90_bwd``), default-on,
in `kda_sm90_order`, then their cuTile engines (``kda_cutile``, ``gdn2_cutile`` and the
``_bwd`` of each, opt-in) at each BLOCK_V that tiles V in `block_v_order`'s order (untimed on these:
gdn_cutile's measured rule); otherwise the backend's block (empty: planning raises
`pygraph.GraphNotSupportedError` naming each slot's reason).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pygraph.engines.base import REFERENCE_SM_COUNT, DeviceInfo, PlanConfig
from pygraph.engines.heuristics import PLACE_BACKEND, assemble
from pygraph_linear_attention.analyzer import LinearAttentionFacts
from pygraph_linear_attention.gdn.cutile_host import BLOCK_V, OCCUPANCY, OCCUPANCY_BWD, SEGMENT
from pygraph_linear_attention.gdn.sm90_host import (
    BLOCK_V_SM90,
    SEGMENT_SM90,
    SPLIT_SM90,
    STAGES_SM90,
    segment_state_elements,
)
from pygraph_linear_attention.kda.cutile_host import BLOCK_V as KDA_BLOCK_V
from pygraph_linear_attention.kda.sm90_host import BLOCK_V_KDA_SM90

__all__ = ["block_v_order", "kda_sm90_order", "recommend", "sm90_order", "split_first"]

# BLOCK_V, measured on the H200's 132 SMs (H16 D128 bf16, cold L2, median of 3, one run;
# docs/linear-attention.md, The backward, the BLOCK_V knob): where the scan's grid at 64 (sequences
# x heads x V / 64 programs) fills at least half the SMs, 64 is first (B4 T4096, 128 programs:
# 0.781 ms against 0.799 at 32; a varlen batch of 8, 256 programs but one 8192-token sequence
# holding the tail: 1.809 against 1.749, within the run's spread); below that, 32 doubles the
# programs (B1 T32768, 32 programs: 2.113 ms at 32 against 3.122 at 64).
_PREFERRED = 64
# OCCUPANCY, measured on the H200 at the same shapes (benchmarks/RESULTS.md, Linear attention,
# History: gdn_cutile at BLOCK_V 32 / OCC 2 first everywhere): the hint 2 on the forward's prepare
# kernel took it from 1.02 to 0.61 ms at 32768 tokens (one CTA of 4 warps per SM left it
# latency-bound), forward 2.13 -> 1.72 ms at B1 T32768, 0.81 -> 0.59 at B4 T4096; on the backward's
# per-chunk kernels forward+backward 8.04 -> 6.84 ms (B1), 3.19 -> 2.56 (B4), 7.04 -> 6.08
# (varlen8). The hint 4 timed the same as 2 (the kernels' shared memory admits two).
_FIRST_OCCUPANCY = 2
# The forward at OCCUPANCY 2 hints its scan too, and at BLOCK_V 32 two scan CTAs fit an SM (111 KB of
# shared memory against 141 at 64), so 32 is the forward's first in every shape (H200, one run: the
# same History entry; ms: B4 T4096 0.544 against 0.652 at 64; varlen8 1.290 against 1.530; B1
# T32768 2.017, the same plan as before). The backward keeps block_v_order: its scans take no hint.
_FIRST_BLOCK_V_FWD = 32


def block_v_order(facts: LinearAttentionFacts, *, sms: int = REFERENCE_SM_COUNT) -> list[int]:
    """The BLOCK_V values that tile V, the first by the scan grid's size against the ``sms`` SMs of
    the device (above: 32 where the grid at 64 fills under half of them), then the others ascending."""
    fits = [b for b in BLOCK_V if b <= facts.head_dim_v and facts.head_dim_v % b == 0]
    programs = facts.sequences * facts.heads_out * max(facts.head_dim_v // _PREFERRED, 1)
    preferred = 32 if programs < sms // 2 and 32 in fits else _PREFERRED
    first = [b for b in fits if b == preferred]
    return first + sorted(b for b in fits if b != preferred)


def recommend(
    modes: Sequence[Any],
    facts: LinearAttentionFacts,
    offered: dict[str, int],
    backend_entries: Sequence[PlanConfig],
    *,
    device: DeviceInfo | None = None,
) -> list[PlanConfig]:
    """The plan list for a graph planned for ``device`` (None: nothing known, the reference card's
    SM count): the engines' configs that accepted the graph, then the backend's block."""
    sms = (device or DeviceInfo()).sms
    if facts.op != "gdn":
        # kda_cutile / gdn2_cutile and their _bwd: the per-channel gates' cuTile engines
        channel = f"{facts.op}_cutile_bwd" if facts.backward else f"{facts.op}_cutile"
        ours = []
        if channel in offered:
            # gdn_cutile's measured BLOCK_V rule for the same scan shape (`block_v_order`: 32 first where
            # the scan's grid at 64 fills under half the SMs, as a long single sequence's), untimed here
            blocks = [b for b in block_v_order(facts, sms=sms) if b in KDA_BLOCK_V]
            ours = [PlanConfig(offered[channel], {"BLOCK_V": b}) for b in blocks]
        # the CuTe DSL engine before them, untimed, in gdn_sm90's measured order for the same scans
        # (`kda_sm90_order`): kda_sm90 / gdn2_sm90 on the forward (their scan and output are gdn_sm90's),
        # kda_sm90_bwd / gdn2_sm90_bwd on the backward (both backwards passed the 26 device cases on
        # the H200, where compute-sanitizer reported out-of-bounds accesses in the cuTile one's
        # gradient scan: benchmarks/RESULTS.md, Linear attention, History, the first kda_sm90 and
        # kda_sm90_bwd)
        hopper = f"{facts.op}_sm90_bwd" if facts.backward else f"{facts.op}_sm90"
        if hopper in offered:
            ours = [*(PlanConfig(offered[hopper], knobs) for knobs in kda_sm90_order(facts, sms=sms)), *ours]
        return assemble(modes, lambda kind: [*ours, PLACE_BACKEND], backend_entries)
    engine = "gdn_cutile_bwd" if facts.backward else "gdn_cutile"
    ours = []
    if engine in offered:
        order = block_v_order(facts, sms=sms)
        hints = OCCUPANCY_BWD if facts.backward else OCCUPANCY

        def entry(block_v: int, occupancy: int, segment: int = SEGMENT[0]) -> PlanConfig:
            knobs = {"BLOCK_V": block_v, "OCCUPANCY": occupancy, "SEGMENT": segment}
            return PlanConfig(offered[engine], knobs)

        first = _FIRST_BLOCK_V_FWD if not facts.backward and _FIRST_BLOCK_V_FWD in order else order[0]
        ours = [entry(first, _FIRST_OCCUPANCY)]
        ours += [entry(b, hints[0]) for b in order]
        if not facts.backward:  # untimed: the forward's scan at 2 CTAs per SM (HINTED_FWD), any BLOCK_V
            ours += [entry(b, _FIRST_OCCUPANCY) for b in order if b != first]
        ours += [entry(order[0], o) for o in hints[1:] if o != _FIRST_OCCUPANCY]
        if facts.head_dim_k % order[0] == 0:  # the split scans, untimed
            ours += [entry(order[0], _FIRST_OCCUPANCY, segment) for segment in SEGMENT[1:]]
    # gdn_sm90 (CuTe DSL) first on the forward: its split scan with the output on warpgroup MMAs
    # (WGMMA 2) measured at least as fast as gdn_cutile's first in every timed cell (H200, the one
    # run that set the rule, recorded in benchmarks/RESULTS.md, Linear attention, History: "gdn_sm90
    # at WGMMA 2 first for every sm90 forward"; ms: B4 T4096 0.520 against 0.521, B1 T32768 1.424
    # against 1.979, varlen8 1.165 against 1.253), and its fused warpgroup scan faster than that
    # (`sm90_order`); gdn_cutile's plans follow as the portable ones.
    if "gdn_sm90" in offered and not facts.backward:
        ours = [*(PlanConfig(offered["gdn_sm90"], knobs) for knobs in sm90_order(facts, sms=sms)), *ours]
    # gdn_sm90_bwd (CuTe DSL) leads every backward since its chunk gradients run fused (WGMMA 2,
    # `gdn.sm90_bwd_chunk`). Before, on warpgroup MMAs at WGMMA 1, it led only where its scans' grid
    # left SMs idle or exceeded two CTAs per SM, gdn_cutile_bwd's first between, 1.5% ahead of it
    # (H200, the pair, ms: B4 T4096 2.521 against gdn_cutile's 2.484); WGMMA 2 took 10% off B4 (H100:
    # 1.570 against 1.744 at WGMMA 1; benchmarks/RESULTS.md, Linear attention; cuTile was not on that
    # machine, so the two were not timed side by side again). STAGES 2 (the scans' prefetch) first
    # where the grid is under the SMs, then the other STAGES, then mma.sync; BLOCK_V 32 before 64.
    if "gdn_sm90_bwd" in offered and facts.backward:
        blocks = [b for b in BLOCK_V_SM90 if facts.head_dim_v % b == 0]
        stages = (2, 1) if split_first(facts, sms=sms) else (1, 2)
        knob_sets = [{"BLOCK_V": b, "STAGES": st, "WGMMA": 1, "SEGMENT": 0} for st in stages for b in blocks]
        knob_sets += [{"BLOCK_V": b, "STAGES": 1, "WGMMA": 0, "SEGMENT": 0} for b in blocks]
        # SEGMENT (both scans segmented, `gdn.sm90_bwd`): first where the forward segments (`sm90_order`:
        # under half the SMs, sequences averaging two segments of 64 chunks), at BLOCK_V 64 and STAGES 1;
        # after the rest elsewhere. Measured (H100, one run, the first forward then the backward, ms):
        # B1 T32768 3.686 at SEGMENT 64 BLOCK_V 64 STAGES 1, 3.848 at BLOCK_V 32, 4.205 at STAGES 2,
        # 5.003 unsegmented (its first before); B4 T4096 (one segment a sequence) 1.928 segmented at
        # BLOCK_V 64 against 1.727 unsegmented. varlen8 gains (3.812 against 4.015: its 8192- and
        # 7680-token sequences split) but has B4's mean length, and the hook sees no lengths (they
        # are on the device): it segments first only where the graph's max_seqlen hint says so
        # (`_segments_first`'s by_longest rule).
        segmented = [
            {"BLOCK_V": b, "STAGES": st, "WGMMA": 1, "SEGMENT": s}
            for s in SEGMENT_SM90
            if s
            for st in (1, 2)
            for b in blocks
        ]
        first_seg = {"BLOCK_V": blocks[-1], "STAGES": 1, "WGMMA": 1, "SEGMENT": _SEGMENT_TOKENS // 64}
        if _segments_first(facts, sms, _scan_grid(facts), by_longest=True):
            knob_sets = [first_seg, *knob_sets, *(k for k in segmented if k != first_seg)]
        else:
            knob_sets += segmented
        # WGMMA 2 (the chunk gradients fused on two warpgroups, `gdn.sm90_bwd_chunk_ws`) before each WGMMA 1
        # set: faster in every cell timed (H100, one run, the first forward then the backward, ms, WGMMA
        # 2 / 1, its first form, both warpgroups on every product): B4 T4096 1.570 / 1.744, B1 T32768
        # (SEGMENT 64, BLOCK_V 64) 3.263 / 3.578, varlen8 3.765 / 4.106; the warpgroups split by
        # dependency took 18-19% more off the kernel (B4 1.457 against that form's 1.580, B1 2.760 /
        # 3.009, varlen8 3.131 / 3.384: benchmarks/RESULTS.md, "gdn, the chunk gradients split by
        # dependency")
        knob_sets = [w for k in knob_sets for w in ([{**k, "WGMMA": 2}, k] if k["WGMMA"] == 1 else [k])]
        sm90 = [PlanConfig(offered["gdn_sm90_bwd"], knobs) for knobs in knob_sets]
        ours = [*sm90, *ours]
    return assemble(modes, lambda kind: [*ours, PLACE_BACKEND], backend_entries)


def _scan_grid(facts: LinearAttentionFacts) -> int:
    """The CuTe DSL scans' CTAs at BLOCK_V 32: sequences x heads x V / 32."""
    return facts.sequences * facts.heads_out * max(facts.head_dim_v // 32, 1)


def _within_two_per_sm(facts: LinearAttentionFacts, sms: int) -> bool:
    """The scans' grid at BLOCK_V 32 at most two CTAs per SM of the device's ``sms``: where the
    prefetching scans (STAGES 2) measured faster (gdn_sm90's forward and backward, kda_sm90)."""
    return _scan_grid(facts) <= 2 * sms


def split_first(facts: LinearAttentionFacts, *, sms: int = REFERENCE_SM_COUNT) -> bool:
    """The CuTe DSL scans' grid at BLOCK_V 32 (sequences x heads x V / 32 CTAs) under the device's
    ``sms`` SMs (B1 T32768 H16: 64 CTAs on the H200's 132), where gdn_sm90_bwd's prefetching scans
    lead."""
    return _scan_grid(facts) < sms


def sm90_order(facts: LinearAttentionFacts, *, sms: int = REFERENCE_SM_COUNT) -> list[dict[str, int]]:
    """gdn_sm90's knob sets: the first by the scan's grid against the device's ``sms`` SMs and the
    sequences' mean length, then every (SPLIT, BLOCK_V, STAGES) on mma.sync, then the split ones at
    WGMMA 1 and at WGMMA 2, then the fused ones at WGMMA 1 (the fused warpgroup scan,
    `gdn.sm90_fused`), unsegmented and at each SEGMENT.

    The first is the fused warpgroup scan at BLOCK_V 64, measured fastest in every timed cell (H100
    80GB HBM3, 132 SMs, the one run that set it: benchmarks/RESULTS.md, "gdn, the fused warpgroup
    scan"; forward ms against the split scan at WGMMA 2, the previous first): B4 T4096 (128 CTAs at
    BLOCK_V 64) 0.380 at STAGES 2 against 0.502 (0.421 at STAGES 1); varlen8 (256 CTAs) 0.996 at
    STAGES 1 against 1.171 (1.027 at STAGES 2); B1 T32768 (32 CTAs, one 512-chunk sequence) 1.160
    at SEGMENT 64 and STAGES 1 against 1.333 (2.404 unsegmented at STAGES 2, 1.806 at SEGMENT 16,
    whose 31-step combine took 0.72 ms). So: STAGES 2 up to one CTA per SM, 1 past it; SEGMENT 64
    where the grid fills under half the SMs and the sequences average two segments (8192 tokens) or
    more. Unsegmented, the two-warpgroup scan (WGMMA 4, `gdn.sm90_fused_ws`, STAGES 2 only) goes
    first: with prepare's inverse on tf32 MMAs (H100, one run) B4 T4096 0.234 ms against 0.280 at
    WGMMA 1 STAGES 2 and varlen8 (256 CTAs) 0.680 against 0.767 at WGMMA 1 STAGES 1; segmented,
    WGMMA 1 stays (B1 T32768 0.852 ms against 0.945 at WGMMA 4, SEGMENT 64 both). A full grid does
    not segment: varlen8 at SEGMENT 64 took 0.651 ms against 0.567 at WGMMA 4 (H100, with the
    warmup; its 128- and 120-chunk sequences do not pay for the phases)."""
    every = [
        {"BLOCK_V": b, "STAGES": st, "SPLIT": sp, "WGMMA": 0, "SEGMENT": 0}
        for sp in SPLIT_SM90
        for b in BLOCK_V_SM90
        if facts.head_dim_v % b == 0
        for st in STAGES_SM90
    ]
    every += [{**k, "WGMMA": w} for w in (1, 2) for k in every if k["SPLIT"]]
    fused_wg = [{**k, "WGMMA": 1} for k in every if not k["SPLIT"] and not k["WGMMA"]]
    every += fused_wg + [{**k, "SEGMENT": s} for s in SEGMENT_SM90 if s for k in fused_wg]  # and segmented
    # WGMMA 3 (P from prepare, on one warpgroup): after the rest
    every += [{**k, "WGMMA": 3} for k in every if k["WGMMA"] == 1 and not k["SPLIT"]]
    # WGMMA 4 (two warpgroups, each double-buffered): first unsegmented (below), the rest after
    every += [{**k, "WGMMA": 4} for k in every if k["WGMMA"] == 3 and k["STAGES"] == 2]
    grid = facts.sequences * facts.heads_out * max(facts.head_dim_v // 64, 1)
    first = {"BLOCK_V": 64, "STAGES": 2, "SPLIT": 0, "WGMMA": 4, "SEGMENT": 0}
    if _segments_first(facts, sms, grid):
        first = {**first, "STAGES": 1, "WGMMA": 1, "SEGMENT": _SEGMENT_TOKENS // 64}
    if first in every:
        every = [first, *(k for k in every if k != first)]
    return every


# SEGMENT's tokens where the hook segments: 64 chunks (above: 16 chunks made the combine's serial
# walk 31 steps at B1 T32768, 0.72 ms of a 1.8 ms forward)
_SEGMENT_TOKENS = 4096


def _segments_first(facts: LinearAttentionFacts, sms: int, grid: int, *, by_longest: bool = False) -> bool:
    """Whether the segmented scans go first: their unsegmented ``grid`` under half the SMs and the
    sequences averaging two segments of `_SEGMENT_TOKENS` or more, or (``by_longest``: the backward)
    the caller's ``max_seqlen`` two segments or more and at least twice the mean length, so the
    unsegmented scans' grid waits on the longest sequences' serial walks; the transitions within
    32-bit offsets either way. The longest-sequence rule, measured (H100, one run, the first forward
    then gdn_sm90_bwd at WGMMA 2, ms): varlen8 (1024 to 8192 tokens, 32768 in all, mean 4096) 3.454
    at SEGMENT 64 BLOCK_V 64 against 3.765 unsegmented at BLOCK_V 32; B4 T4096 (every sequence the
    mean) 1.749 against 1.570, so equal lengths stay unsegmented (benchmarks/RESULTS.md, "the chunk
    gradients fused on two warpgroups"). The forward keeps the first rule alone: varlen8 at SEGMENT
    64 measured slower there (0.651 against 0.567 ms)."""
    mean = facts.tokens / max(facts.sequences, 1)
    few_long = grid < sms // 2 and mean >= 2 * _SEGMENT_TOKENS
    longest = facts.max_seqlen or 0
    outlasts = by_longest and longest >= 2 * max(_SEGMENT_TOKENS, mean)
    return (few_long or outlasts) and not _segments_overflow(facts)


def _segments_overflow(facts: LinearAttentionFacts) -> bool:
    """The segmented scan's transitions past 32-bit offsets at the hook's SEGMENT (gdn_sm90 declines it)."""
    return segment_state_elements(facts, _SEGMENT_TOKENS // 64) >= 2**31


def kda_sm90_order(facts: LinearAttentionFacts, *, sms: int = REFERENCE_SM_COUNT) -> list[dict[str, int]]:
    """kda_sm90's / gdn2_sm90's knob sets: BLOCK_V 32 first, STAGES 2 first up to two scan CTAs per
    SM of the device's ``sms`` and 1 past that (gdn_sm90's measured rule for the same scan,
    `sm90_order`); then the rest (BLOCK_V 64, then the untimed 16)."""
    blocks = [b for b in BLOCK_V_KDA_SM90 if facts.head_dim_v % b == 0]
    stages = (2, 1) if _within_two_per_sm(facts, sms) else (1, 2)
    return [{"BLOCK_V": b, "STAGES": st} for b in blocks for st in stages]
