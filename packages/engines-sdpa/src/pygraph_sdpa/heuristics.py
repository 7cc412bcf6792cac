"""The ``sdpa_fwd`` and ``sdpa_bwd`` families' ranking hook.

A graph falls in a cell: (head dim, causal, the key length's bucket, grouped heads). A cell's rule
says whether the python engine leads the backend's entries or trails them, and which of its knob
values comes first; each rule is set from a timing of both on the H200 (`benchmarks/sdpa/bench_sdpa`)
and cites it in docs/sdpa.md. No cell has been timed yet, so `FWD_RULES` and `BWD_RULES` are empty
and every cell keeps the backend's entries first, in the backend's own order, with the python
engines (``sdpa_fwd_sm90``, ``sdpa_bwd_sm90``: opt-in until their device proof) after them where
they are offered.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from pygraph.engines.base import PlanConfig
from pygraph.engines.heuristics import PLACE_BACKEND, assemble
from pygraph_sdpa.analyzer import SdpaFacts

__all__ = ["BWD_RULES", "FWD_RULES", "Rule", "cell_of", "recommend"]

SEQ_BUCKETS = (1024, 4096)  # key lengths up to 1024, up to 4096, past it


@dataclasses.dataclass(frozen=True)
class Rule:
    """A timed cell's placement: ``leads`` puts the python engine before the backend's entries;
    ``first`` is its knob value tried first (P_REGS forward, DETERMINISTIC backward)."""

    leads: bool
    first: int = 0
    measured: str = ""  # the run it comes from (command, date), as docs/sdpa.md cites it


Cell = tuple[int, bool, int, bool]  # (head dim, causal, key-length bucket, grouped heads)
FWD_RULES: dict[Cell, Rule] = {}
BWD_RULES: dict[Cell, Rule] = {}


def cell_of(facts: SdpaFacts) -> Cell:
    """The graph's cell: head dim, causal, the bucket of its key length (index into the upper
    bounds `SEQ_BUCKETS`, past them the last), grouped heads (K or V with fewer heads than q)."""
    bucket = next((i for i, bound in enumerate(SEQ_BUCKETS) if facts.seq_kv <= bound), len(SEQ_BUCKETS))
    grouped = facts.heads_k != facts.heads_q or facts.heads_v != facts.heads_q
    return (facts.head_dim_qk, bool(facts.causal), bucket, grouped)


def recommend(
    modes: Sequence[Any], facts: SdpaFacts, offered: dict[str, int], backend_entries: Sequence[PlanConfig]
) -> list[PlanConfig]:
    """The plan list: per mode, the backend's block and the python engine's configs, in the order
    the graph's cell's rule gives (untimed: the backend first, the knobs' first values first)."""
    engine, knob, rules = (
        ("sdpa_bwd_sm90", "DETERMINISTIC", BWD_RULES)
        if facts.backward
        else ("sdpa_fwd_sm90", "P_REGS", FWD_RULES)
    )
    if engine not in offered:
        return assemble(modes, lambda kind: [PLACE_BACKEND], backend_entries)
    rule = rules.get(cell_of(facts), Rule(leads=False))
    values = [rule.first, 1 - rule.first]
    if facts.backward and facts.deterministic:  # the atomic dQ is not deterministic
        values = [1]
    ours = [PlanConfig(offered[engine], {knob: v}) for v in values]
    proposals = [*ours, PLACE_BACKEND] if rule.leads else [PLACE_BACKEND, *ours]
    return assemble(modes, lambda kind: proposals, backend_entries)
