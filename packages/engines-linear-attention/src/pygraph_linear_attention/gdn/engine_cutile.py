"""``gdn_cutile`` and ``gdn_cutile_bwd``: the ``gdn`` family's portable engines (cuTile; SM80 and up).

``gdn_cutile`` runs `gdn.cutile_fwd`'s kernels (the chunk table, the chunks' preparation, the scan;
SEGMENT: the split scan), ``gdn_cutile_bwd`` those of `gdn.cutile_bwd` after the forward's table and
prepare (the forward recomputed). Deciding support reads the facts and the graph's declared strides
(`gdn.support`) and probes for cuTile without importing it. `build_plan` imports the kernels and binds
them to the graph in a `common.engine_cutile.CutilePlan`, with the launch sequence of `gdn.cutile_host`
or `gdn.cutile_bwd_host` (OCCUPANCY: the hinted launches recompiled with cuTile's occupancy hint).
"""

from __future__ import annotations

import dataclasses
from types import MappingProxyType
from typing import Any

from pygraph.engines.base import (
    BaseEngine,
    Capabilities,
    CompiledPlan,
    EngineRequest,
    ExecutionContext,
    PlanConfig,
)
from pygraph.errors import GraphNotSupportedError
from pygraph.ir.dtypes import data_type
from pygraph_linear_attention.analyzer import LinearAttentionFacts
from pygraph_linear_attention.common.engine_cutile import (
    CUTILE_INSTALL,
    CutilePlan,
    cutile_installed,
    cutile_launch,
)
from pygraph_linear_attention.common.support import declared_operands, facts_of, operand_roles
from pygraph_linear_attention.gdn.cutile_bwd_host import launch_backward
from pygraph_linear_attention.gdn.cutile_host import (
    BLOCK_V,
    HINTED_BWD,
    HINTED_FWD,
    OCCUPANCY,
    OCCUPANCY_BWD,
    SEGMENT,
    launch_forward,
)
from pygraph_linear_attention.gdn.support import FEATURES, config_for, support_reason

__all__ = ["GdnCutileBwdEngine", "GdnCutileEngine", "block_v_reason", "segment_reason"]


def block_v_reason(facts: LinearAttentionFacts, block_v: Any) -> str | None:
    """Why BLOCK_V=``block_v`` cannot tile this graph's value dim, or None."""
    if block_v not in BLOCK_V:
        return f"knob BLOCK_V={block_v!r} outside its domain {BLOCK_V}"
    if facts.head_dim_v % block_v:
        return f"BLOCK_V={block_v} does not divide the value head dim {facts.head_dim_v}"
    return None


def segment_reason(facts: LinearAttentionFacts, block_v: int, segment: Any) -> str | None:
    """Why SEGMENT=``segment`` cannot split this graph's scan at ``block_v``, or None."""
    if segment not in SEGMENT:
        return f"knob SEGMENT={segment!r} outside its domain {SEGMENT}"
    if segment and facts.head_dim_k % block_v:
        return f"SEGMENT={segment} needs BLOCK_V={block_v} to divide the key head dim {facts.head_dim_k}"
    return None


class GdnCutileEngine(BaseEngine):
    name = "gdn_cutile"
    requires = MappingProxyType({"cuda.tile": f"cuTile ({CUTILE_INSTALL})"})
    capabilities = Capabilities(
        sm_lo=80,
        sm_hi=121,
        dtypes={data_type.BFLOAT16, data_type.HALF},
        features=FEATURES,
        knob_domains={"BLOCK_V": BLOCK_V, "OCCUPANCY": OCCUPANCY, "SEGMENT": SEGMENT},
    )

    def _facts(self, request: EngineRequest) -> LinearAttentionFacts:
        return facts_of(self.name, request)

    # which direction this engine serves (the backward is its own slot, gdn_cutile_bwd)
    serves_backward = False

    def check_support(self, request: EngineRequest) -> None:
        facts = self._facts(request)
        if facts.backward != self.serves_backward:
            other = "gdn_cutile_bwd" if facts.backward else "gdn_cutile"
            raise GraphNotSupportedError(
                f"{self.name}: serves {'gdn_bwd' if self.serves_backward else 'gdn'} graphs; "
                f"{'gdn_bwd' if facts.backward else 'gdn'} graphs are served by {other}"
            )
        reason = support_reason(facts) or self.capabilities.mismatch(facts, device=request.device)
        if reason is not None:
            raise GraphNotSupportedError(f"{self.name}: {reason}")
        if not cutile_installed():
            raise ImportError(f"{self.name}: needs cuTile ({CUTILE_INSTALL})")

    def get_workspace_size(self, request: EngineRequest, plan: PlanConfig) -> int:
        facts = self._facts(request)
        knobs = {getattr(k, "name", k): v for k, v in (plan.knobs or {}).items()}
        block_v, segment = knobs.get("BLOCK_V", BLOCK_V[0]), knobs.get("SEGMENT", SEGMENT[0])
        if block_v_reason(facts, block_v):
            block_v = BLOCK_V[0]
        if segment_reason(facts, block_v, segment):
            segment = SEGMENT[0]
        return config_for(facts, block_v, segment).workspace_bytes

    def build_plan(
        self, request: EngineRequest, plan: PlanConfig, ctx: ExecutionContext | None
    ) -> CompiledPlan:
        self.check_support(request)
        facts = self._facts(request)
        knobs = {getattr(k, "name", k): v for k, v in (plan.knobs or {}).items()}
        block_v, segment = knobs.get("BLOCK_V", BLOCK_V[0]), knobs.get("SEGMENT", SEGMENT[0])
        reason = (
            block_v_reason(facts, block_v)
            or self.capabilities.mismatch(facts, knobs, device=request.device)
            or segment_reason(facts, block_v, segment)
        )
        if reason is not None:
            raise GraphNotSupportedError(f"{self.name}: {reason}")
        launch = cutile_launch()
        positions, declared = declared_operands(self.name, request, operand_roles(facts))
        from pygraph_linear_attention.gdn.cutile_fwd import KERNELS

        occupancy = knobs.get("OCCUPANCY", OCCUPANCY[0])
        kernels, run, hinted_names = KERNELS, launch_forward, HINTED_FWD.get(occupancy, ())
        if facts.backward:
            from pygraph_linear_attention.gdn.cutile_bwd import BWD_KERNELS

            kernels, run, hinted_names = {**KERNELS, **BWD_KERNELS}, launch_backward, HINTED_BWD
        if occupancy:
            from pygraph_linear_attention.gdn.cutile_fwd import hinted

            kernels = kernels | {n: hinted(kernels[n], occupancy=occupancy) for n in hinted_names}
        cfg = config_for(facts, block_v, segment)
        return CutilePlan(request.graph.name, cfg, positions, declared, launch, kernels, run, self.name)


class GdnCutileBwdEngine(GdnCutileEngine):
    """``gdn_cutile_bwd``: the same kernels' backward (gdn_bwd graphs)."""

    name = "gdn_cutile_bwd"
    serves_backward = True
    capabilities = dataclasses.replace(
        GdnCutileEngine.capabilities,
        knob_domains={"BLOCK_V": BLOCK_V, "OCCUPANCY": OCCUPANCY_BWD, "SEGMENT": SEGMENT},
    )
