"""The ``gemm`` family's ranking hook: one named config per shape bucket, the rest of the domain behind it.

Rules read the facts only. Placement against the backend is a measurement: a cell where the backend
was timed faster follows it (`_BACKEND_LEADS`); an untimed cell keeps the default order (ours
first), and says so below.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from pygraph.engines.base import PlanConfig
from pygraph.engines.heuristics import PLACE_BACKEND, assemble
from pygraph.ir.dtypes import heur_mode

from pygraph_gemm.analyzer import GemmFacts
from pygraph_gemm.engine_sm90 import KNOB_DOMAINS

__all__ = ["recommend", "shape_bucket", "tile_rule"]

# (dtype, bucket) cells where the backend's plan was timed faster than ours on the H200. Empty until
# measured: every cell is untimed and keeps our engine first (see benchmarks/RESULTS.md).
_BACKEND_LEADS: frozenset[tuple[str, str]] = frozenset()


def shape_bucket(facts: GemmFacts) -> str:
    """skinny (M <= 64): swap A and B so N fills the tile's M; small: under one wave of 128x256 tiles; large."""
    batch = 1
    for d in facts.batch:
        batch *= d
    if facts.m <= 64 and facts.n >= 256:
        return "skinny"
    if facts.m * facts.n * batch <= 128 * 256 * 132:
        return "small"
    return "large"


def tile_rule(facts: GemmFacts) -> dict[str, Any]:
    """The config named first for the graph's bucket (v1 kernel, measured 2026-11-29 on the H200)."""
    bucket = shape_bucket(facts)
    base = {"TILE_M": 128, "TILEK": 64, "STAGES": 0, "RASTER": "m", "TILE_CGA_N": 1}
    if bucket == "skinny":
        tile_n = max(16, min(64, 16 * ((facts.m + 15) // 16)))
        return {**base, "TILE_N": tile_n, "TILE_CGA_M": 1, "SWAP_AB": True}
    if bucket == "small":
        return {**base, "TILE_N": 128, "TILE_CGA_M": 1, "SWAP_AB": False}
    return {**base, "TILE_N": 256, "TILE_CGA_M": 2, "SWAP_AB": False}


def _domain() -> list[dict[str, Any]]:
    axes = sorted(KNOB_DOMAINS)
    return [dict(zip(axes, point, strict=True)) for point in itertools.product(*(KNOB_DOMAINS[a] for a in axes))]


def recommend(
    modes: Sequence[Any], facts: GemmFacts, offered: dict[str, int], backend_entries: Sequence[PlanConfig]
) -> list[PlanConfig]:
    engine_id = offered.get("gemm_sm90")
    if engine_id is None:
        return assemble(modes, lambda kind: [], backend_entries)
    first = tile_rule(facts)
    cell = ("io", shape_bucket(facts))
    behind = [PlanConfig(engine_id, k) for k in _domain() if k != first]

    def propose(kind: Any) -> list[PlanConfig]:
        if kind is heur_mode.FALLBACK:
            safe = {**first, "TILE_N": 128, "TILE_CGA_M": 1, "TILE_CGA_N": 1}
            return [PlanConfig(engine_id, safe), PLACE_BACKEND]
        ours = [PlanConfig(engine_id, first)]
        if cell in _BACKEND_LEADS:
            return [PLACE_BACKEND, *ours, *behind]
        return [*ours, PLACE_BACKEND, *behind]

    return assemble(modes, propose, backend_entries)
