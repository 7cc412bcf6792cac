"""The ``gdn``, ``kda`` and ``gdn2`` families' ranking hook.

``gdn``: the one engine that ships is ``gdn_cutile`` (the forward); every BLOCK_V that tiles the
value head dim is proposed, the rule's pick first. No backend lowers these ops, so the backend's
block is empty; it keeps its place after ours. ``kda`` and ``gdn2`` have no engine yet, so their
list is the backend's block (empty: planning raises `pygraph.GraphNotSupportedError` naming each
planned slot's reason).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pygraph.engines.base import PlanConfig
from pygraph.engines.heuristics import PLACE_BACKEND, assemble
from pygraph_linear_attention.analyzer import LinearAttentionFacts
from pygraph_linear_attention.kernels.gdn_cutile_host import BLOCK_V

__all__ = ["block_v_order", "recommend"]

# The H200's SM count: the scan's programs (sequences x heads x V / BLOCK_V) should cover it
FILL_SMS = 132


def block_v_order(facts: LinearAttentionFacts) -> list[int]:
    """The BLOCK_V values that tile V, the pick first: 64 while the scan's grid at 64 covers the
    SMs, else the smallest (more programs for few sequences). A rule from the grid's size, not
    yet a measurement (benchmarks/linear_attention/bench_gdn.py times the candidates)."""
    fits = [b for b in BLOCK_V if b <= facts.head_dim_v and facts.head_dim_v % b == 0]
    if not fits:
        return []
    programs = facts.sequences * facts.heads_out * (facts.head_dim_v // 64 if 64 in fits else 1)
    first = 64 if 64 in fits and programs >= FILL_SMS else min(fits)
    return [first, *(b for b in fits if b != first)]


def recommend(
    modes: Sequence[Any],
    facts: LinearAttentionFacts,
    offered: dict[str, int],
    backend_entries: Sequence[PlanConfig],
) -> list[PlanConfig]:
    """The plan list: gdn_cutile's configs (where it accepted the graph), then the backend's block."""
    ours = []
    if "gdn_cutile" in offered:
        ours = [PlanConfig(offered["gdn_cutile"], {"BLOCK_V": b}) for b in block_v_order(facts)]
    return assemble(modes, lambda kind: [*ours, PLACE_BACKEND], backend_entries)
