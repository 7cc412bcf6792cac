"""The ``gdn``, ``kda`` and ``gdn2`` families' ranking hook.

``gdn``: the engine that ships is ``gdn_cutile``; every BLOCK_V that tiles the value head dim is
proposed, the measured fastest first, and for the forward each with both OUTPUT passes, the one
`output_order` puts first before the other. No backend lowers these ops, so the backend's
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
from pygraph_linear_attention.kernels.gdn_cutile_host import BLOCK_V, BWD_BLOCK_V, OUTPUT

__all__ = ["block_v_order", "output_order", "recommend"]

# BLOCK_V 64 first: measured fastest at B4 T4096 H16 D128 bf16 on the H200 (0.743 ms against 0.820
# at 32 and 0.843 at 128, cold L2, median of 3), where its 128 scan programs do not cover the 132
# SMs; other shapes are untimed and keep that order.
_PREFERRED = 64
# The fused scan computes the output in its sequential loop; the separate pass moves it out of it.
# A sequence-level grid this small leaves most SMs idle for the whole scan, so the shorter serial
# chain wins there (the H200's 132 SMs; see docs/linear-attention.md, "Measured").
_SEPARATE_BELOW = 132


def output_order(facts: LinearAttentionFacts) -> list[str]:
    """The forward's OUTPUT passes, first the one this shape's scan grid favours."""
    programs = facts.sequences * facts.heads_out * max(facts.head_dim_v // _PREFERRED, 1)
    first = "separate" if programs < _SEPARATE_BELOW else "fused"
    return [first, *(o for o in OUTPUT if o != first)]


def block_v_order(facts: LinearAttentionFacts) -> list[int]:
    """The BLOCK_V values that tile V, 64 first where it tiles V, then the others in domain order."""
    domain = BWD_BLOCK_V if facts.backward else BLOCK_V
    fits = [b for b in domain if b <= facts.head_dim_v and facts.head_dim_v % b == 0]
    return [b for b in fits if b == _PREFERRED] + [b for b in fits if b != _PREFERRED]


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
        if facts.backward:
            ours = [PlanConfig(offered[engine], {"BLOCK_V": b}) for b in block_v_order(facts)]
        else:
            ours = [
                PlanConfig(offered[engine], {"BLOCK_V": b, "OUTPUT": o})
                for o in output_order(facts)
                for b in block_v_order(facts)
            ]
    return assemble(modes, lambda kind: [*ours, PLACE_BACKEND], backend_entries)
