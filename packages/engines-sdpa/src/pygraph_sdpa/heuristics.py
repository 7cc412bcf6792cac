"""The ``sdpa_fwd`` and ``sdpa_bwd`` families' ranking hook.

A graph falls in a cell: (head dim, causal, the key length's bucket, grouped heads). A cell's rule
says whether the python engine leads the backend's entries or trails them, and which of its knob
values comes first; each rule is set from a timing of both on the H200
(`benchmarks/sdpa/bench_sdpa`) and cites its section of benchmarks/RESULTS.md (`Rule.measured`). In
every timed cell the backend measured faster (forward 0.67-0.74x of it, backward 0.59-0.73x), so
every rule keeps the backend's entries first, in the backend's own order, with the python engines
(``sdpa_fwd_sm90``, ``sdpa_bwd_sm90``) after them; an untimed cell does the same (`UNTIMED_FWD`,
`UNTIMED_BWD`). No rule reads the device's SM count: the cells are set by head dim, causality, key
length and grouped heads, and the engines' kernels are not persistent (one CTA per query or key
block, head and batch), so nothing of theirs is sized by it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from pygraph.engines.base import DeviceInfo, PlanConfig
from pygraph.engines.heuristics import PLACE_BACKEND, assemble
from pygraph_sdpa.analyzer import SdpaFacts

__all__ = ["BWD_RULES", "FWD_RULES", "UNTIMED_BWD", "UNTIMED_FWD", "Rule", "cell_of", "recommend"]

SEQ_BUCKETS = (1024, 4096)  # key lengths up to 1024, up to 4096, past it


@dataclasses.dataclass(frozen=True)
class Rule:
    """A timed cell's placement: ``leads`` puts the python engine before the backend's entries;
    ``first`` is its knob value tried first (P_REGS forward, DETERMINISTIC backward)."""

    leads: bool
    first: int = 0
    measured: str = ""  # the run it comes from (command, card, the section of benchmarks/RESULTS.md)


Cell = tuple[int, bool, int, bool]  # (head dim, causal, key-length bucket, grouped heads)

_BENCH = (
    "bash scripts/device/run.sh sdpa bench, H200; benchmarks/RESULTS.md, SDPA: sdpa_fwd_sm90 and sdpa_bwd_sm90 "
    "against cuDNN and flash-attention 4"
)
# forward: P in registers (P_REGS=1) beat P through shared memory in each cell, by 7-13%
FWD_RULES: dict[Cell, Rule] = {
    (128, False, 1, False): Rule(leads=False, first=1, measured=f"4x16x4096x128: 0.71x cuDNN ({_BENCH})"),
    (128, True, 1, False): Rule(leads=False, first=1, measured=f"4x16x4096x128 causal: 0.74x ({_BENCH})"),
    (128, False, 0, False): Rule(leads=False, first=1, measured=f"16x16x1024x128: 0.67x ({_BENCH})"),
    (64, True, 2, False): Rule(leads=False, first=1, measured=f"2x32x8192x64 causal: 0.72x ({_BENCH})"),
}
# backward: dQ by its own pass (DETERMINISTIC=1) beat the atomic dQ in each cell (which took 4-29%
# longer: the fp32 reductions into L2 cost more than the pass's recomputed products)
BWD_RULES: dict[Cell, Rule] = {
    (128, False, 1, False): Rule(leads=False, first=1, measured=f"4x16x4096x128: 0.66x cuDNN ({_BENCH})"),
    (128, True, 1, False): Rule(leads=False, first=1, measured=f"4x16x4096x128 causal: 0.73x ({_BENCH})"),
    (128, False, 0, False): Rule(leads=False, first=1, measured=f"16x16x1024x128: 0.67x ({_BENCH})"),
    (64, True, 2, False): Rule(leads=False, first=1, measured=f"2x32x8192x64 causal: 0.59x ({_BENCH})"),
}
# an untimed cell: the backend first (it led every timed one), the python engine's knob as in every
# timed cell
UNTIMED_FWD = Rule(leads=False, first=1, measured="untimed: the backend first")
UNTIMED_BWD = Rule(leads=False, first=1, measured="untimed: the backend first")


def cell_of(facts: SdpaFacts) -> Cell:
    """The graph's cell: head dim, causal, the bucket of its key length (index into the upper
    bounds `SEQ_BUCKETS`, past them the last), grouped heads (K or V with fewer heads than q)."""
    bucket = next((i for i, bound in enumerate(SEQ_BUCKETS) if facts.seq_kv <= bound), len(SEQ_BUCKETS))
    grouped = facts.heads_k != facts.heads_q or facts.heads_v != facts.heads_q
    return (facts.head_dim_qk, bool(facts.causal), bucket, grouped)


def recommend(
    modes: Sequence[Any],
    facts: SdpaFacts,
    offered: dict[str, int],
    backend_entries: Sequence[PlanConfig],
    *,
    device: DeviceInfo | None = None,
) -> list[PlanConfig]:
    """The plan list: per mode, the backend's block and the python engine's configs, in the order
    the graph's cell's rule gives (untimed: `UNTIMED_FWD` / `UNTIMED_BWD`). ``device`` is taken as
    every family's hook takes it; no cell's rule reads it (module docstring)."""
    engine, knob, rules, untimed = (
        ("sdpa_bwd_sm90", "DETERMINISTIC", BWD_RULES, UNTIMED_BWD)
        if facts.backward
        else ("sdpa_fwd_sm90", "P_REGS", FWD_RULES, UNTIMED_FWD)
    )
    if engine not in offered:
        return assemble(modes, lambda kind: [PLACE_BACKEND], backend_entries)
    rule = rules.get(cell_of(facts), untimed)
    values = [rule.first, 1 - rule.first]
    if facts.backward and facts.deterministic:  # the atomic dQ is not deterministic
        values = [1]
    ours = [PlanConfig(offered[engine], {knob: v}) for v in values]
    proposals = [*ours, PLACE_BACKEND] if rule.leads else [PLACE_BACKEND, *ours]
    return assemble(modes, lambda kind: proposals, backend_entries)
