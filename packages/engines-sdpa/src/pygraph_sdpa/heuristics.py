"""The ``sdpa_fwd`` and ``sdpa_bwd`` families' ranking hook.

No python engine ships yet (both slots are planned), so no cell has been timed: every cell keeps
the backend's entries first, in the backend's own order, exactly the list a family without a hook
gets. When an engine lands, its rules go here per cell (head dim, causal, sequence-length bucket,
GQA, ragged), each placing ours before or after the backend by a measurement named next to it;
an untimed cell keeps the backend first and says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pygraph.engines.base import PlanConfig
from pygraph.engines.heuristics import PLACE_BACKEND, assemble
from pygraph_sdpa.analyzer import SdpaFacts

__all__ = ["recommend"]


def recommend(
    modes: Sequence[Any], facts: SdpaFacts, offered: dict[str, int], backend_entries: Sequence[PlanConfig]
) -> list[PlanConfig]:
    """The plan list: the backend's block for each mode, and nothing of ours (no engine is offered)."""
    return assemble(modes, lambda kind: [PLACE_BACKEND], backend_entries)
