"""``kda_sm90`` / ``gdn2_sm90`` and ``kda_sm90_bwd`` / ``gdn2_sm90_bwd``: the ``kda`` and ``gdn2``
families' Hopper forward and backward (CuTe DSL).

`kda.sm90_fwd`: a prepare kernel that takes every per-channel decay (gamma, the decay-weighted
products by sub-chunks, the WY transform, the decayed q and k), then gdn's split scan and whole-V
output on warpgroup MMAs (`gdn.sm90_fwd.GdnSm90Fwd`, which it extends). They serve what
``kda_cutile`` / ``gdn2_cutile`` serve (`kda.support`) within the CuTe DSL kernels' build
(`common.engine_sm90.build_reason`: K and V of 64 or 128, every operand row-major contiguous, a_log
and dt_bias FLOAT, 32-bit offsets), SM90 only. The plan is `common.engine_sm90.Sm90Plan` (the
declared geometry and 16-byte alignment checked per call, raw addresses into the compiled function).
The backwards run `kda.sm90_bwd` (the forward's prepare and scan again, gdn's gradient scan with
per-channel decays, two chunk gradient kernels, the head and parameter sums). All four are
default-on: `family.py` says on what evidence.
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
    ALIGNED,
    CUTE_INSTALL,
    Sm90Plan,
    build_reason,
    check_block_v,
    dtype_names,
    knobs_in_domains,
    plan_label,
)
from pygraph_linear_attention.common.host import regions_bytes, search_steps
from pygraph_linear_attention.common.support import declared_operands, facts_of, operand_roles
from pygraph_linear_attention.kda.sm90_host import (
    BLOCK_V_KDA_SM90,
    BWD_POINTERS,
    POINTERS,
    STAGES_KDA_SM90,
    backward_regions,
    bwd_key_for,
    compiled_backward,
    compiled_forward,
    key_for,
    workspace_regions,
)
from pygraph_linear_attention.kda.support import FEATURES, config_for, support_reason

__all__ = ["Gdn2Sm90BwdEngine", "Gdn2Sm90Engine", "KdaSm90BwdEngine", "KdaSm90Engine"]

# GDN-2's operands its kernels read 16 bytes at a time besides the family's (the compiled functions
# assume those pointers 16-byte aligned: `kda.sm90_host`): beta and the write gate
GDN2_ALIGNED = ("beta", "w_gate")


def _sizes(cfg: Any) -> tuple[int | float, ...]:
    """The compiled function's 32-bit sizes (an absent per-head operand counts as one head per
    output head, so no group divides by 0), then the scale (a run-time argument: graphs differing
    only in scale share one compiled function)."""
    ho = cfg.heads_out
    return (
        cfg.tokens, cfg.sequences, search_steps(cfg.sequences), cfg.heads_qk, cfg.heads_v, ho,
        cfg.heads_g or ho, cfg.heads_beta or ho, cfg.heads_w or ho, cfg.heads_a_log or ho,
        cfg.heads_dt_bias or ho, float(cfg.scale),
    )  # fmt: skip


class KdaSm90Engine(BaseEngine):
    """``kda_sm90``: kda (forward) graphs. Knobs: BLOCK_V (the scan's value rows per CTA) and STAGES
    (2: the scan prefetches the next chunk)."""

    name = "kda_sm90"
    requires = MappingProxyType({"cutlass": f"CuTe DSL ({CUTE_INSTALL})"})
    op = "kda"
    serves_backward = False
    capabilities = Capabilities(
        sm_lo=90,
        sm_hi=90,
        dtypes={data_type.BFLOAT16, data_type.HALF},
        features=FEATURES,
        knob_domains={"BLOCK_V": BLOCK_V_KDA_SM90, "STAGES": STAGES_KDA_SM90},
    )

    def _facts(self, request: EngineRequest) -> LinearAttentionFacts:
        return facts_of(self.name, request)

    def check_support(self, request: EngineRequest) -> None:
        facts = self._facts(request)
        reason = (
            support_reason(facts, self.op, self.serves_backward)
            or build_reason(facts, operand_roles(facts), chunk_states=True)
            or self.capabilities.mismatch(facts, device=request.device)
        )
        if reason is not None:
            raise GraphNotSupportedError(f"{self.name}: {reason}")
        if importlib.util.find_spec("cutlass") is None:
            raise ImportError(f"{self.name}: needs CuTe DSL ({CUTE_INSTALL})")

    def _knobs(self, facts: LinearAttentionFacts, plan: PlanConfig) -> tuple[int, int]:
        """(BLOCK_V, STAGES) of the plan, checked against their domains and the value head dim."""
        knobs = knobs_in_domains(self, facts, plan)
        block_v, stages = knobs.get("BLOCK_V", BLOCK_V_KDA_SM90[0]), knobs.get("STAGES", STAGES_KDA_SM90[0])
        check_block_v(self.name, facts, block_v)
        return block_v, stages

    # the forward's and the backward's differences: the compiled function's pointers, its workspace
    # and its compile (the module's functions looked up per call, so tests can stand them in)
    pointers = POINTERS
    aligned = ALIGNED  # the operands read or written 16 bytes at a time (GDN-2: GDN2_ALIGNED too)

    def _regions(self, cfg: Any) -> tuple:
        return workspace_regions(cfg)

    def _compiled(self, cfg: Any, names: dict[str, str], stages: int) -> Any:
        return compiled_forward(key_for(cfg, names, stages))

    def get_workspace_size(self, request: EngineRequest, plan: PlanConfig) -> int:
        facts = self._facts(request)
        return regions_bytes(self._regions(config_for(facts, self._knobs(facts, plan)[0])))

    def build_plan(
        self, request: EngineRequest, plan: PlanConfig, ctx: ExecutionContext | None
    ) -> CompiledPlan:
        self.check_support(request)
        facts = self._facts(request)
        block_v, stages = self._knobs(facts, plan)
        cfg = config_for(facts, block_v)
        operands = declared_operands(self.name, request, operand_roles(facts))
        names = dtype_names(operands)
        compiled = kernels_ready(self.name, plan_label(plan, cfg), lambda: self._compiled(cfg, names, stages))
        return Sm90Plan(
            self.name,
            request.graph.name,
            compiled,
            operands,
            self._regions(cfg),
            _sizes(cfg),
            self.pointers,
            self.aligned,
        )


class Gdn2Sm90Engine(KdaSm90Engine):
    """``gdn2_sm90``: gdn2 (forward) graphs, the same kernels with GDN-2's gates."""

    name = "gdn2_sm90"
    op = "gdn2"
    aligned = (*ALIGNED, *GDN2_ALIGNED)


class KdaSm90BwdEngine(KdaSm90Engine):
    """``kda_sm90_bwd``: kda_bwd graphs. Knobs: BLOCK_V (the scans' value rows per CTA) and STAGES
    (2: both scans prefetch the next chunk)."""

    name = "kda_sm90_bwd"
    serves_backward = True
    pointers = BWD_POINTERS

    def _regions(self, cfg: Any) -> tuple:
        return backward_regions(cfg)

    def _compiled(self, cfg: Any, names: dict[str, str], stages: int) -> Any:
        return compiled_backward(bwd_key_for(cfg, names, stages))


class Gdn2Sm90BwdEngine(KdaSm90BwdEngine):
    """``gdn2_sm90_bwd``: gdn2_bwd graphs, the same kernels with GDN-2's gates and write gate."""

    name = "gdn2_sm90_bwd"
    op = "gdn2"
    aligned = (*ALIGNED, *GDN2_ALIGNED)
