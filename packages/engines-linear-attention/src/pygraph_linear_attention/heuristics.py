"""The ``gdn``, ``kda`` and ``gdn2`` families' ranking hook.

``gdn``: the one engine that ships is ``gdn_cutile`` (the forward); every BLOCK_V that tiles the
value head dim is proposed, the measured fastest first. No backend lowers these ops, so the backend's
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

# BLOCK_V 64 first: measured fastest at B4 T4096 H16 D128 bf16 on the H200 (0.743 ms against 0.820
# at 32 and 0.843 at 128, cold L2, median of 3), where its 128 scan programs do not cover the 132
# SMs; other shapes are untimed and keep that order.
_PREFERRED = 64


def block_v_order(facts: LinearAttentionFacts) -> list[int]:
    """The BLOCK_V values that tile V, 64 first where it tiles V, then the others ascending."""
    fits = [b for b in BLOCK_V if b <= facts.head_dim_v and facts.head_dim_v % b == 0]
    first = [b for b in fits if b == _PREFERRED]
    return first + sorted(b for b in fits if b != _PREFERRED)


def recommend(
    modes: Sequence[Any],
    facts: LinearAttentionFacts,
    offered: dict[str, int],
    backend_entries: Sequence[PlanConfig],
) -> list[PlanConfig]:
    """The plan list: gdn_cutile's configs (where it accepted the graph), then the backend's block."""
    engine = "gdn_cutile_bwd" if facts.backward else "gdn_cutile"
    ours = []
    if engine in offered:
        ours = [PlanConfig(offered[engine], {"BLOCK_V": b}) for b in block_v_order(facts)]
    return assemble(modes, lambda kind: [*ours, PLACE_BACKEND], backend_entries)
