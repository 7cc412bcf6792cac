"""``gdn_sm90`` and ``gdn_sm90_bwd``: the ``gdn`` family's Hopper engines (CuTe DSL).

``gdn_sm90`` (`gdn.sm90_fwd`): the per-chunk WY prepare and the state scan with its output (SPLIT: a
states-only scan, then every chunk's output; WGMMA: that scan on warpgroup MMAs). ``gdn_sm90_bwd``
(`gdn.sm90_bwd`): the forward recomputed, the reverse gradient scan (WGMMA: both scans on warpgroup
MMAs), the per-chunk gradient kernels and the head sums. They serve what ``gdn_cutile`` and
``gdn_cutile_bwd`` serve (`gdn.support`), within the CuTe DSL kernels' narrower build
(`common.engine_sm90.build_reason`: K and V of 64 or 128, every operand row-major contiguous
([T, heads, dim]), a_log and dt_bias FLOAT). `build_plan` compiles the configuration (CuTe DSL, about
6 s for the forward and 23 s for the backward on a CPU core, then kept per process and on disk:
`gdn.sm90_host.compiled_forward`, `compiled_backward`; a build that took a second or more is logged
at info with its time, `pygraph.engines.base.kernels_ready`) and binds the operand positions in a
`common.engine_sm90.Sm90Plan`.
"""

from __future__ import annotations

import importlib.util
from types import MappingProxyType
from typing import Any

from pygraph.engines.base import (
    BaseEngine,
    Capabilities,
    CompiledPlan,
    EngineRequest,
    ExecutionContext,
    PlanConfig,
    kernels_ready,
)
from pygraph.errors import GraphNotSupportedError
from pygraph.ir.dtypes import data_type
from pygraph_linear_attention.analyzer import LinearAttentionFacts
from pygraph_linear_attention.common.engine_sm90 import (
    CUTE_INSTALL,
    Sm90Plan,
    build_reason,
    check_block_v,
    chunk_states_reason,
    dtype_names,
    knob_values,
    knobs_in_domains,
    plan_label,
)
from pygraph_linear_attention.common.host import regions_bytes, search_steps
from pygraph_linear_attention.common.support import declared_operands, facts_of, operand_roles
from pygraph_linear_attention.gdn.sm90_host import (
    BLOCK_V_SM90,
    SEGMENT_SM90,
    SPLIT_SM90,
    STAGES_SM90,
    WGMMA_BWD_SM90,
    WGMMA_SM90,
    backward_regions,
    bwd_key_for,
    compiled_backward,
    compiled_forward,
    key_for,
    segment_slots,
    segment_state_elements,
    workspace_bytes,
    workspace_regions,
)
from pygraph_linear_attention.gdn.support import FEATURES, config_for, support_reason

__all__ = ["GdnSm90BwdEngine", "GdnSm90Engine"]

# the compiled function's pointer arguments, in order (`gdn.sm90_host._compile`)
POINTERS = (
    "q", "k", "v", "g", "beta", "a_log", "dt_bias", "cu_seqlens", "h0", "o", "ht", "gamma", "w", "u", "hs", "vnew",
    "tb", "p", "seg_mb", "seg_st", "con",
)  # fmt: skip
# the compiled backward's (`gdn.sm90_host._compile_backward`)
BWD_POINTERS = (
    "q", "k", "v", "g", "beta", "a_log", "dt_bias", "cu_seqlens", "h0", "dO", "dht",
    "dQ", "dK", "dV", "dG", "dBeta", "dh0", "d_a_log", "d_dt_bias",
    "gamma", "w", "u", "t", "hs", "vnew", "dh", "dvnew", "dq", "dk", "dw", "dv", "dgp", "dg", "dbeta", "da",
    "seg_mb", "seg_st", "con",
)  # fmt: skip


def _sm90_reason(facts: LinearAttentionFacts, backward: bool) -> str | None:
    """Why gdn_sm90 (``backward``: gdn_sm90_bwd) cannot serve a graph gdn_cutile (gdn_cutile_bwd)
    serves (the rule and the value), or None."""
    if facts.backward != backward:
        mine, theirs = ("gdn_bwd", "gdn") if backward else ("gdn", "gdn_bwd")
        other = "gdn_sm90" if backward else "gdn_sm90_bwd"
        return f"serves {mine} graphs; {theirs} graphs are served by {other}"
    return build_reason(facts, operand_roles(facts), backward)


def _fused_wg(split: Any, wgmma: Any) -> bool:
    """Whether the knobs pick the fused scan on warpgroup MMAs (SPLIT 0, WGMMA 1, 3 or 4: `gdn.sm90_fused`,
    `gdn.sm90_fused_ws`)."""
    return not split and wgmma in (1, 3, 4)


def _stored_p(split: Any, wgmma: Any) -> bool:
    """Whether prepare stores each chunk's decayed causal scores P (WGMMA 3 reads them; WGMMA 4's
    output warpgroup computes its own)."""
    return not split and wgmma == 3


def _sizes(cfg: Any) -> tuple[int | float, ...]:
    """The compiled functions' 32-bit size arguments, then the scale (a run-time argument: graphs
    differing only in scale share one compiled function)."""
    return (
        cfg.tokens, cfg.sequences, search_steps(cfg.sequences), cfg.heads_qk, cfg.heads_v, cfg.heads_out,
        cfg.heads_g, cfg.heads_beta, cfg.heads_a_log, cfg.heads_dt_bias, float(cfg.scale),
    )  # fmt: skip


def _check_segment_elements(name: str, facts: LinearAttentionFacts, segment: int) -> None:
    """SEGMENT's transitions must stay under 2^31 elements: the kernels index them with 32-bit offsets."""
    if segment and (elements := segment_state_elements(facts, segment)) >= 2**31:
        slots = segment_slots(facts.tokens, facts.sequences, segment)
        raise GraphNotSupportedError(
            f"{name}: SEGMENT={segment}: the segments' transitions hold {slots} slots x "
            f"{facts.heads_out} heads x (V + K) x K = {elements} elements: the kernels index with "
            "32-bit offsets (< 2^31)"
        )


class GdnSm90Engine(BaseEngine):
    name = "gdn_sm90"
    requires = MappingProxyType({"cutlass": f"CuTe DSL ({CUTE_INSTALL})"})
    serves_backward = False
    capabilities = Capabilities(
        sm_lo=90,
        sm_hi=90,
        dtypes={data_type.BFLOAT16, data_type.HALF},
        features=FEATURES,
        knob_domains={
            "BLOCK_V": BLOCK_V_SM90,
            "STAGES": STAGES_SM90,
            "SPLIT": SPLIT_SM90,
            "WGMMA": WGMMA_SM90,
            "SEGMENT": SEGMENT_SM90,
        },
    )

    def _facts(self, request: EngineRequest) -> LinearAttentionFacts:
        return facts_of(self.name, request)

    def check_support(self, request: EngineRequest) -> None:
        facts = self._facts(request)
        reason = (
            support_reason(facts)
            or _sm90_reason(facts, self.serves_backward)
            or self.capabilities.mismatch(facts, device=request.device)
        )
        if reason is not None:
            raise GraphNotSupportedError(f"{self.name}: {reason}")
        if importlib.util.find_spec("cutlass") is None:
            raise ImportError(f"{self.name}: needs CuTe DSL ({CUTE_INSTALL})")

    def _knobs(self, facts: LinearAttentionFacts, plan: PlanConfig) -> tuple[int, int, int, int, int]:
        """(BLOCK_V, STAGES, SPLIT, WGMMA, SEGMENT) of the plan, checked against their domains, each
        other and the value head dim."""
        knobs = knobs_in_domains(self, facts, plan)
        block_v, stages = knobs.get("BLOCK_V", BLOCK_V_SM90[0]), knobs.get("STAGES", STAGES_SM90[0])
        split = knobs.get("SPLIT", SPLIT_SM90[0])
        wgmma = knobs.get("WGMMA", WGMMA_SM90[0])
        segment = knobs.get("SEGMENT", SEGMENT_SM90[0])
        if segment and not _fused_wg(split, wgmma):
            raise GraphNotSupportedError(
                f"{self.name}: knob SEGMENT={segment!r} needs the fused warpgroup scan (SPLIT=0, WGMMA=1), "
                f"got SPLIT={split!r}, WGMMA={wgmma!r}"
            )
        _check_segment_elements(self.name, facts, segment)
        if wgmma in (3, 4) and split:
            raise GraphNotSupportedError(
                f"{self.name}: knob WGMMA={wgmma!r} is a fused warpgroup scan (3: reading prepare's scores; "
                f"4: on two warpgroups) and needs SPLIT=0, got SPLIT={split!r}"
            )
        if wgmma == 4 and stages != 2:
            raise GraphNotSupportedError(
                f"{self.name}: knob WGMMA=4 (two warpgroups, each double-buffering its own tiles) needs "
                f"STAGES=2, got STAGES={stages!r}"
            )
        if wgmma == 2 and not split:
            raise GraphNotSupportedError(
                f"{self.name}: knob WGMMA={wgmma!r} needs SPLIT=1 (it moves the split scan's output kernel to "
                f"warpgroup MMAs; the fused scan is WGMMA=1), got SPLIT={split!r}"
            )
        if split and (reason := chunk_states_reason(facts)) is not None:
            raise GraphNotSupportedError(f"{self.name}: SPLIT=1: {reason}")
        check_block_v(self.name, facts, block_v)
        return block_v, stages, split, wgmma, segment

    def get_workspace_size(self, request: EngineRequest, plan: PlanConfig) -> int:
        cfg = config_for(self._facts(request), BLOCK_V_SM90[0])  # the workspace does not depend on BLOCK_V
        knobs = knob_values(plan)
        split = bool(knobs.get("SPLIT", SPLIT_SM90[0]))
        fused_wg = _fused_wg(split, knobs.get("WGMMA", WGMMA_SM90[0]))
        wgmma = knobs.get("WGMMA", WGMMA_SM90[0])
        segment = knobs.get("SEGMENT", SEGMENT_SM90[0]) if fused_wg else 0
        return workspace_bytes(cfg, split, fused_wg, segment, _stored_p(split, wgmma))

    def build_plan(
        self, request: EngineRequest, plan: PlanConfig, ctx: ExecutionContext | None
    ) -> CompiledPlan:
        self.check_support(request)
        facts = self._facts(request)
        block_v, stages, split, wgmma, segment = self._knobs(facts, plan)
        cfg = config_for(facts, block_v)
        operands = declared_operands(self.name, request, operand_roles(facts))
        names = dtype_names(operands)
        key = key_for(
            cfg, beta=names["beta"], h0=names.get("h0", "float32"), ht=names.get("ht", "float32"),
            cu=names["cu_seqlens"], stages=stages, split=bool(split), wgmma=int(wgmma), segment=int(segment),
        )  # fmt: skip
        regions = workspace_regions(
            cfg, bool(split), _fused_wg(split, wgmma), int(segment), _stored_p(split, wgmma)
        )
        compiled = kernels_ready(self.name, plan_label(plan, cfg), lambda: compiled_forward(key))
        return Sm90Plan(self.name, request.graph.name, compiled, operands, regions, _sizes(cfg), POINTERS)


class GdnSm90BwdEngine(GdnSm90Engine):
    """``gdn_sm90_bwd``: gdn_bwd graphs (BLOCK_V: the value rows of the scans' CTAs; WGMMA: 1 both
    scans on warpgroup MMAs, 2 the chunk gradients fused on two warpgroups too; STAGES, with WGMMA:
    2 prefetches the scans' next chunk; SEGMENT, with WGMMA: chunks a segment of both scans, 0
    unsegmented)."""

    name = "gdn_sm90_bwd"
    serves_backward = True
    capabilities = Capabilities(
        sm_lo=90,
        sm_hi=90,
        dtypes={data_type.BFLOAT16, data_type.HALF},
        features=FEATURES,
        knob_domains={
            "BLOCK_V": BLOCK_V_SM90,
            "STAGES": STAGES_SM90,
            "WGMMA": WGMMA_BWD_SM90,
            "SEGMENT": SEGMENT_SM90,
        },
    )

    def _knobs(self, facts: LinearAttentionFacts, plan: PlanConfig) -> tuple[int, int, int, int, int]:
        knobs = knobs_in_domains(self, facts, plan)
        block_v, wgmma = knobs.get("BLOCK_V", BLOCK_V_SM90[0]), knobs.get("WGMMA", WGMMA_BWD_SM90[0])
        stages = knobs.get("STAGES", STAGES_SM90[0])
        segment = knobs.get("SEGMENT", SEGMENT_SM90[0])
        for knob, value in (("STAGES", stages != 1), ("SEGMENT", segment)):
            if value and not wgmma:
                raise GraphNotSupportedError(
                    f"{self.name}: knob {knob}={knobs[knob]!r} needs WGMMA=1 or 2 (the prefetching and the "
                    f"segmented scans are the warpgroup ones), got WGMMA={wgmma!r}"
                )
        _check_segment_elements(self.name, facts, segment)
        check_block_v(self.name, facts, block_v)
        return block_v, stages, 1, wgmma, segment

    def get_workspace_size(self, request: EngineRequest, plan: PlanConfig) -> int:
        segment = knob_values(plan).get("SEGMENT", SEGMENT_SM90[0])
        return regions_bytes(backward_regions(config_for(self._facts(request), BLOCK_V_SM90[0]), segment))

    def build_plan(
        self, request: EngineRequest, plan: PlanConfig, ctx: ExecutionContext | None
    ) -> CompiledPlan:
        self.check_support(request)
        facts = self._facts(request)
        block_v, stages, _, wgmma, segment = self._knobs(facts, plan)
        cfg = config_for(facts, block_v)
        operands = declared_operands(self.name, request, operand_roles(facts))
        key = bwd_key_for(cfg, dtype_names(operands), int(wgmma), stages, int(segment))
        return Sm90Plan(
            self.name,
            request.graph.name,
            kernels_ready(self.name, plan_label(plan, cfg), lambda: compiled_backward(key)),
            operands,
            backward_regions(cfg, int(segment)),
            _sizes(cfg),
            BWD_POINTERS,
        )
