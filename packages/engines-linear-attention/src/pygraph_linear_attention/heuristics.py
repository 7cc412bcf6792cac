"""The ``gdn``, ``kda`` and ``gdn2`` families' ranking hook.

No python engine ships yet (every slot is planned), so there is nothing of ours to rank: the hook
keeps the backend's entries first, as every untimed cell does. No backend lowers these ops, so
that list is empty and planning raises `pygraph.GraphNotSupportedError` naming the backend's
decline and each planned slot's reason. When an engine lands, its rules go here per cell (head
dim, sequence-length bucket, GVA, state dtype), each ranking the engines by a measurement named
next to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pygraph.engines.base import PlanConfig
from pygraph.engines.heuristics import PLACE_BACKEND, assemble
from pygraph_linear_attention.analyzer import LinearAttentionFacts

__all__ = ["recommend"]


def recommend(
    modes: Sequence[Any],
    facts: LinearAttentionFacts,
    offered: dict[str, int],
    backend_entries: Sequence[PlanConfig],
) -> list[PlanConfig]:
    """The plan list: the backend's block for each mode (empty: no backend lowering), nothing of ours."""
    return assemble(modes, lambda kind: [PLACE_BACKEND], backend_entries)
