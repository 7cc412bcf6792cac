"""``kda_cutile`` / ``gdn2_cutile`` and ``kda_cutile_bwd`` / ``gdn2_cutile_bwd``: the ``kda`` and
``gdn2`` families' portable forward and backward (cuTile).

The forwards run `kda.cutile_fwd`'s kernels (the chunk table, ``kda_prepare_kernel``,
``kda_state_scan_kernel`` and ``kda_output_kernel``) through `kda.cutile_host`, the backwards
`kda.cutile_bwd`'s through `kda.cutile_bwd_host`; support is `kda.support`'s rules. The plan is
`common.engine_cutile.CutilePlan` (the declared geometry checked per call, device arrays over the
pack's pointers and the workspace's regions, the kernels enqueued on the call's stream). They ship
opt-in (``PYGRAPH_ENABLE_OPT_IN_ENGINES``): `family.py` says why.
"""

from __future__ import annotations

from types import MappingProxyType

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
from pygraph_linear_attention.kda.cutile_bwd_host import launch_backward
from pygraph_linear_attention.kda.cutile_host import BLOCK_V, launch_forward
from pygraph_linear_attention.kda.support import FEATURES, config_for, support_reason

__all__ = ["Gdn2CutileBwdEngine", "Gdn2CutileEngine", "KdaCutileBwdEngine", "KdaCutileEngine"]


class KdaCutileEngine(BaseEngine):
    """``kda_cutile``: kda (forward) graphs."""

    name = "kda_cutile"
    requires = MappingProxyType({"cuda.tile": f"cuTile ({CUTILE_INSTALL})"})
    op = "kda"
    serves_backward = False
    capabilities = Capabilities(
        sm_lo=80,
        sm_hi=121,
        dtypes={data_type.BFLOAT16, data_type.HALF},
        features=FEATURES,
        knob_domains={"BLOCK_V": BLOCK_V},
    )

    def _facts(self, request: EngineRequest) -> LinearAttentionFacts:
        return facts_of(self.name, request)

    def _block_v(self, facts: LinearAttentionFacts, plan: PlanConfig) -> int:
        knobs = {getattr(k, "name", k): v for k, v in (plan.knobs or {}).items()}
        block_v = knobs.get("BLOCK_V", BLOCK_V[0])
        reason = self.capabilities.mismatch(facts, knobs)
        if reason is None and facts.head_dim_v % block_v:
            reason = f"BLOCK_V={block_v} does not divide the value head dim {facts.head_dim_v}"
        if reason is not None:
            raise GraphNotSupportedError(f"{self.name}: {reason}")
        return block_v

    def check_support(self, request: EngineRequest) -> None:
        facts = self._facts(request)
        reason = support_reason(facts, self.op, self.serves_backward) or self.capabilities.mismatch(
            facts, device=request.device
        )
        if reason is not None:
            raise GraphNotSupportedError(f"{self.name}: {reason}")
        if not cutile_installed():
            raise ImportError(f"{self.name}: needs cuTile ({CUTILE_INSTALL})")

    def get_workspace_size(self, request: EngineRequest, plan: PlanConfig) -> int:
        facts = self._facts(request)
        return config_for(facts, self._block_v(facts, plan)).workspace_bytes

    def build_plan(
        self, request: EngineRequest, plan: PlanConfig, ctx: ExecutionContext | None
    ) -> CompiledPlan:
        self.check_support(request)
        facts = self._facts(request)
        cfg = config_for(facts, self._block_v(facts, plan))
        launch = cutile_launch()
        positions, declared = declared_operands(self.name, request, operand_roles(facts))
        if facts.backward:
            from pygraph_linear_attention.kda.cutile_bwd import BWD_KERNELS as kernels

            run = launch_backward
        else:
            from pygraph_linear_attention.kda.cutile_fwd import KERNELS as kernels

            run = launch_forward
        return CutilePlan(
            request.graph.name, cfg, positions, declared, launch, kernels, run, engine=self.name
        )


class Gdn2CutileEngine(KdaCutileEngine):
    """``gdn2_cutile``: gdn2 (forward) graphs, the same kernels with GDN-2's gates."""

    name = "gdn2_cutile"
    op = "gdn2"


class KdaCutileBwdEngine(KdaCutileEngine):
    """``kda_cutile_bwd``: kda_bwd graphs (the backward's kernels, `kda.cutile_bwd`)."""

    name = "kda_cutile_bwd"
    serves_backward = True


class Gdn2CutileBwdEngine(KdaCutileBwdEngine):
    """``gdn2_cutile_bwd``: gdn2_bwd graphs."""

    name = "gdn2_cutile_bwd"
    op = "gdn2"
