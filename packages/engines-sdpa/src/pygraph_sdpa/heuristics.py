"""The ``sdpa_fwd`` and ``sdpa_bwd`` families' ranking hook.

No cell has been timed on the device yet, so every cell keeps the backend's entries first, in the
backend's own order, and the python engines (``sdpa_fwd_sm90``, ``sdpa_bwd_sm90``: opt-in until
their device proof, see docs/sdpa.md) go after them where they are offered. Rules placing it first come per cell (head dim, causal,
sequence-length bucket, GQA), each by a measurement named next to it.
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
    """The plan list: the backend's block for each mode, then the python engine where it is offered
    (untimed: the backend leads every cell)."""
    ours = []
    if "sdpa_fwd_sm90" in offered:  # P through shared memory first (untimed), then in registers
        ours = [PlanConfig(offered["sdpa_fwd_sm90"], {"P_REGS": p}) for p in (0, 1)]
    if "sdpa_bwd_sm90" in offered:  # the atomic dQ first, unless the graph asks for determinism
        modes_of = (1,) if facts.deterministic else (0, 1)
        ours = [PlanConfig(offered["sdpa_bwd_sm90"], {"DETERMINISTIC": d}) for d in modes_of]
    return assemble(modes, lambda kind: [PLACE_BACKEND, *ours], backend_entries)
