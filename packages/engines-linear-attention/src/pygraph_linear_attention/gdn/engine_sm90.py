"""``gdn_sm90`` and ``gdn_sm90_bwd``: the ``gdn`` family's Hopper engines (CuTe DSL).

``gdn_sm90`` (``kernels/gdn_sm90_fwd.py``): the per-chunk WY prepare and the state scan with its
output (SPLIT: a states-only scan, then every chunk's output; WGMMA: that scan on warpgroup MMAs).
``gdn_sm90_bwd`` (``kernels/gdn_sm90_bwd.py``): the forward recomputed, the reverse gradient scan
(WGMMA: both scans on warpgroup MMAs), the per-chunk gradient kernels and the head sums. They serve what ``gdn_cutile`` and
``gdn_cutile_bwd`` serve, within the kernels' narrower build: K and V of 64 or 128, every operand
row-major contiguous ([T, heads, dim]), a_log and dt_bias FLOAT. `build_plan` compiles the
configuration (CuTe DSL, about 6 s for the forward and 23 s for the backward on a CPU core, then
kept per process and on disk: `gdn_sm90_host.compiled_forward`, `compiled_backward`; a build that
took a second or more is logged at info with its time, `pygraph.engines.base.kernels_ready`) and
binds the operand positions; a call checks the declared geometry and the 16-byte alignment the
copies need, and launches with raw addresses.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from pygraph.engines.base import (
    BaseEngine,
    Capabilities,
    CompiledPlan,
    EngineRequest,
    ExecutionContext,
    PlanConfig,
    kernels_ready,
    knobs_key,
)
from pygraph.errors import GraphNotSupportedError
from pygraph.execution.errors import OperandGeometryError
from pygraph.ir.dtypes import data_type
from pygraph_linear_attention.analyzer import LinearAttentionFacts
from pygraph_linear_attention.gdn.engine_cutile import (
    _FEATURES,
    _NAMES,
    _operands,
    _row_major,
    _support_reason,
    config_for,
    declared_operands,
    facts_of,
)
from pygraph_linear_attention.gdn.cutile_host import regions_bytes
from pygraph_linear_attention.gdn.sm90_host import (
    BLOCK_V_SM90,
    HEAD_DIMS_SM90,
    SPLIT_SM90,
    STAGES_SM90,
    WGMMA_BWD_SM90,
    WGMMA_SM90,
    backward_regions,
    bwd_key_for,
    chunk_state_elements,
    compiled_backward,
    compiled_forward,
    key_for,
    search_steps,
    workspace_bytes,
    workspace_regions,
)

__all__ = [
    "GdnSm90BwdEngine", "GdnSm90Engine", "GdnSm90Plan", "build_reason", "check_block_v", "dtype_names",
    "knobs_in_domains", "plan_label",
]  # fmt: skip

_INSTALL = "pip install 'pygraph-engines-linear-attention[cute]'"


def plan_label(plan: PlanConfig, cfg: Any) -> str:
    """A plan's configuration in a log line: its knobs and the head dims."""
    knobs = ",".join(f"{k}={v}" for k, v in knobs_key(plan.knobs))
    return f"K={cfg.key_dim} V={cfg.value_dim}" + (f" [{knobs}]" if knobs else "")


# the compiled function's pointer arguments, in order (`gdn_sm90_host`)
_POINTERS = (
    "q", "k", "v", "g", "beta", "a_log", "dt_bias", "cu_seqlens", "h0", "o", "ht", "gamma", "w", "u", "hs", "vnew",
)  # fmt: skip
_ALIGNED = ("q", "k", "v", "o", "dO")  # read or written by 16-byte copies
# the compiled backward's (`gdn_sm90_host._compile_backward`)
_BWD_POINTERS = (
    "q", "k", "v", "g", "beta", "a_log", "dt_bias", "cu_seqlens", "h0", "dO", "dht",
    "dQ", "dK", "dV", "dG", "dBeta", "dh0", "d_a_log", "d_dt_bias",
    "gamma", "w", "u", "t", "hs", "vnew", "dh", "dvnew", "dq", "dk", "dw", "dv", "dgp", "dg", "dbeta", "da",
)  # fmt: skip


def _chunk_states_reason(facts: LinearAttentionFacts) -> str | None:
    """Why the per-chunk states ([T // 64 + N + 1, HO, V, K]: the split scan's and the backward's)
    cannot be indexed with 32-bit offsets, or None."""
    elements = chunk_state_elements(facts)
    if elements >= 2**31:
        slots = facts.tokens // 64 + facts.sequences + 1
        return (
            f"the per-chunk states hold (T // 64 + N + 1) x heads x V x K = {slots} x {facts.heads_out} x "
            f"{facts.head_dim_v} x {facts.head_dim_k} = {elements} elements: the kernels index with 32-bit offsets (< 2^31)"
        )
    return None


def _sm90_reason(facts: LinearAttentionFacts, backward: bool) -> str | None:
    """Why gdn_sm90 (``backward``: gdn_sm90_bwd) cannot serve a graph gdn_cutile (gdn_cutile_bwd)
    serves (the rule and the value), or None."""
    if facts.backward != backward:
        mine, theirs = ("gdn_bwd", "gdn") if backward else ("gdn", "gdn_bwd")
        other = "gdn_sm90" if backward else "gdn_sm90_bwd"
        return f"serves {mine} graphs; {theirs} graphs are served by {other}"
    return build_reason(facts, _operands(facts), backward)


def build_reason(facts: LinearAttentionFacts, operands: dict[str, Any], chunk_states: bool) -> str | None:
    """The CuTe DSL kernels' own rules (gdn_sm90's and kda_sm90's): K and V of 64 or 128, 32-bit
    offsets (with ``chunk_states`` also over the per-chunk states), a_log and dt_bias FLOAT, every
    operand (``operands`` by role) row-major contiguous. The rule and the value, or None."""
    if facts.head_dim_k not in HEAD_DIMS_SM90 or facts.head_dim_v not in HEAD_DIMS_SM90:
        return f"head dims K={facts.head_dim_k}, V={facts.head_dim_v}: each must be one of {HEAD_DIMS_SM90}"
    elements = facts.tokens * facts.heads_out * max(facts.head_dim_k, facts.head_dim_v)
    if elements >= 2**31:
        return (
            f"T x heads x head dim = {facts.tokens} x {facts.heads_out} x "
            f"{max(facts.head_dim_k, facts.head_dim_v)} = {elements}: the kernels index with 32-bit offsets (< 2^31)"
        )
    if chunk_states:
        reason = _chunk_states_reason(facts)
        if reason is not None:
            return reason
    for role, t in operands.items():
        if role in ("a_log", "dt_bias") and t.data_type is not data_type.FLOAT:
            return f"{role} must be FLOAT, got {t.data_type.name}"
        shape = tuple(int(d) for d in t.dim)
        stride = tuple(int(s) for s in (t.stride or _row_major(shape)))
        if any(d > 1 for d in shape) and stride != _row_major(shape):
            return f"operand {role} ({t.name}) must be row-major contiguous {list(_row_major(shape))}, got stride {list(stride)}"
    return None


def _sizes(cfg: Any) -> tuple[int, ...]:
    """The compiled functions' 32-bit size arguments."""
    return (
        cfg.tokens, cfg.sequences, search_steps(cfg.sequences), cfg.heads_qk, cfg.heads_v, cfg.heads_out,
        cfg.heads_g, cfg.heads_beta, cfg.heads_a_log, cfg.heads_dt_bias,
    )  # fmt: skip


class GdnSm90Plan(CompiledPlan):
    """A compiled CuTe DSL linear-attention function (gdn_sm90's forward or backward, kda_sm90's)
    bound to one graph: operand positions, geometry and workspace settled at build, down to where each
    of the compiled function's pointers (``pointers``, in its argument order) comes from. ``engine``
    names it in its refusals; ``aligned`` the roles its kernels read or write 16 bytes at a time."""

    reads_stream = True
    checks_geometry = True  # every operand held to its declared shape and stride in `execute`

    def __init__(
        self,
        engine: str,
        name: str,
        fn: Any,
        operands: tuple[dict, dict],
        regions: tuple,
        sizes: tuple,
        pointers: tuple = _POINTERS,
        aligned: tuple = _ALIGNED,
    ) -> None:
        self.engine_name, self._name, self._fn, self._sizes = engine, name, fn, sizes
        positions, declared = operands  # `declared_operands`
        # (role, pack position, declared shape, declared stride, 16-byte copies read or write it)
        self._rows = tuple(
            (role, pos, tuple(declared[role].shape), tuple(declared[role].stride), role in aligned)
            for role, pos in positions.items()
        )
        self._workspace_bytes = regions_bytes(regions)
        # each pointer argument: (index into the call's operands, -1 for none; workspace offset)
        offsets = {r.name: r.offset for r in regions}
        index = {row[0]: i for i, row in enumerate(self._rows)}
        self._sources = tuple((index.get(role, -1), offsets.get(role, offsets["spare"])) for role in pointers)

    def get_workspace_size(self) -> int:
        return self._workspace_bytes

    def execute(self, graph: Any, pack: Any, ctx: ExecutionContext) -> None:
        bufs = pack.buffers
        workspace = ctx.workspace or 0
        if not workspace:
            self._refuse(f"needs a workspace of {self._workspace_bytes} bytes, got none")
        if workspace % 256:
            self._refuse(f"workspace pointer {workspace:#x} is not 256-byte aligned")
        got = []
        for role, pos, shape, stride, aligned in self._rows:
            buf = bufs[pos]
            if buf.shape != shape or buf.stride != stride:
                self._refuse(
                    f"operand {role} is shape {list(buf.shape)} stride {list(buf.stride)}; the plan is "
                    f"compiled for the declared shape {list(shape)} stride {list(stride)}"
                )
            if aligned and buf.pointer % 16:
                self._refuse(
                    f"operand {role} at {buf.pointer:#x} is not 16-byte aligned (its rows are read or written 16 bytes at a time)"
                )
            got.append(buf.pointer)
        pointers = [got[i] if i >= 0 else workspace + offset for i, offset in self._sources]
        self._fn(*pointers, *self._sizes, ctx.stream or 0)

    def _refuse(self, rule: str) -> None:
        raise OperandGeometryError(f"{self.engine_name} (graph {self._name!r}): {rule}", tensor=None)


def _knob_values(plan: PlanConfig) -> dict[str, Any]:
    """The plan's knobs by name."""
    return {getattr(k, "name", k): v for k, v in (plan.knobs or {}).items()}


def knobs_in_domains(engine: BaseEngine, facts: LinearAttentionFacts, plan: PlanConfig) -> dict[str, Any]:
    """The plan's knobs by name, each checked against ``engine``'s domain (`Capabilities.mismatch`)."""
    problem = engine.capabilities.mismatch(facts, plan.knobs or {})
    if problem is not None:
        raise GraphNotSupportedError(f"{engine.name}: {problem}")
    return _knob_values(plan)


def check_block_v(engine: str, facts: LinearAttentionFacts, block_v: int) -> None:
    """Decline (naming ``engine``) a BLOCK_V that does not tile the value head dim."""
    if facts.head_dim_v % block_v:
        raise GraphNotSupportedError(
            f"{engine}: BLOCK_V={block_v} does not divide the value head dim {facts.head_dim_v}"
        )


def dtype_names(operands: tuple[dict, dict]) -> dict[str, str]:
    """The dtype names by role of `declared_operands`' result (what the compile keys hold)."""
    return {role: _NAMES[d.dtype] for role, d in operands[1].items()}


class GdnSm90Engine(BaseEngine):
    name = "gdn_sm90"
    serves_backward = False
    capabilities = Capabilities(
        sm_lo=90,
        sm_hi=90,
        dtypes={data_type.BFLOAT16, data_type.HALF},
        features=_FEATURES,
        knob_domains={
            "BLOCK_V": BLOCK_V_SM90,
            "STAGES": STAGES_SM90,
            "SPLIT": SPLIT_SM90,
            "WGMMA": WGMMA_SM90,
        },
    )

    def _facts(self, request: EngineRequest) -> LinearAttentionFacts:
        return facts_of(self.name, request)

    def check_support(self, request: EngineRequest) -> None:
        facts = self._facts(request)
        reason = (
            _support_reason(facts)
            or _sm90_reason(facts, self.serves_backward)
            or self.capabilities.mismatch(facts, device=request.device)
        )
        if reason is not None:
            raise GraphNotSupportedError(f"{self.name}: {reason}")
        if importlib.util.find_spec("cutlass") is None:
            raise ImportError(f"{self.name}: needs CuTe DSL ({_INSTALL})")

    def _knobs(self, facts: LinearAttentionFacts, plan: PlanConfig) -> tuple[int, int, int, int]:
        """(BLOCK_V, STAGES, SPLIT, WGMMA) of the plan, checked against their domains and the value
        head dim."""
        knobs = knobs_in_domains(self, facts, plan)
        block_v, stages = knobs.get("BLOCK_V", BLOCK_V_SM90[0]), knobs.get("STAGES", STAGES_SM90[0])
        split = knobs.get("SPLIT", SPLIT_SM90[0])
        wgmma = knobs.get("WGMMA", WGMMA_SM90[0])
        if wgmma and not split:
            raise GraphNotSupportedError(
                f"{self.name}: knob WGMMA={wgmma!r} needs SPLIT=1 (the warpgroup scan is the split one), got SPLIT={split!r}"
            )
        if split and (reason := _chunk_states_reason(facts)) is not None:
            raise GraphNotSupportedError(f"{self.name}: SPLIT=1: {reason}")
        check_block_v(self.name, facts, block_v)
        return block_v, stages, split, wgmma

    def get_workspace_size(self, request: EngineRequest, plan: PlanConfig) -> int:
        cfg = config_for(self._facts(request), BLOCK_V_SM90[0])  # the workspace does not depend on BLOCK_V
        return workspace_bytes(cfg, bool(_knob_values(plan).get("SPLIT", SPLIT_SM90[0])))

    def build_plan(
        self, request: EngineRequest, plan: PlanConfig, ctx: ExecutionContext | None
    ) -> CompiledPlan:
        self.check_support(request)
        facts = self._facts(request)
        block_v, stages, split, wgmma = self._knobs(facts, plan)
        cfg = config_for(facts, block_v)
        operands = declared_operands(self.name, request, _operands(facts))
        names = dtype_names(operands)
        key = key_for(
            cfg, beta=names["beta"], h0=names.get("h0", "float32"), ht=names.get("ht", "float32"),
            cu=names["cu_seqlens"], stages=stages, split=bool(split), wgmma=int(wgmma),
        )  # fmt: skip
        regions = workspace_regions(cfg, bool(split))
        compiled = kernels_ready(self.name, plan_label(plan, cfg), lambda: compiled_forward(key))
        return GdnSm90Plan(self.name, request.graph.name, compiled, operands, regions, _sizes(cfg))


class GdnSm90BwdEngine(GdnSm90Engine):
    """``gdn_sm90_bwd``: gdn_bwd graphs (BLOCK_V: the value rows of the scans' CTAs; WGMMA: both
    scans on warpgroup MMAs; STAGES, with WGMMA: 2 prefetches the scans' next chunk)."""

    name = "gdn_sm90_bwd"
    serves_backward = True
    capabilities = Capabilities(
        sm_lo=90,
        sm_hi=90,
        dtypes={data_type.BFLOAT16, data_type.HALF},
        features=_FEATURES,
        knob_domains={"BLOCK_V": BLOCK_V_SM90, "STAGES": STAGES_SM90, "WGMMA": WGMMA_BWD_SM90},
    )

    def _knobs(self, facts: LinearAttentionFacts, plan: PlanConfig) -> tuple[int, int, int, int]:
        knobs = knobs_in_domains(self, facts, plan)
        block_v, wgmma = knobs.get("BLOCK_V", BLOCK_V_SM90[0]), knobs.get("WGMMA", WGMMA_BWD_SM90[0])
        stages = knobs.get("STAGES", STAGES_SM90[0])
        if stages != 1 and not wgmma:
            raise GraphNotSupportedError(
                f"{self.name}: knob STAGES={stages!r} needs WGMMA=1 (the prefetching gradient scan is the "
                f"warpgroup one), got WGMMA={wgmma!r}"
            )
        check_block_v(self.name, facts, block_v)
        return block_v, stages, 1, wgmma

    def get_workspace_size(self, request: EngineRequest, plan: PlanConfig) -> int:
        return regions_bytes(backward_regions(config_for(self._facts(request), BLOCK_V_SM90[0])))

    def build_plan(
        self, request: EngineRequest, plan: PlanConfig, ctx: ExecutionContext | None
    ) -> CompiledPlan:
        self.check_support(request)
        facts = self._facts(request)
        block_v, stages, _, wgmma = self._knobs(facts, plan)
        cfg = config_for(facts, block_v)
        operands = declared_operands(self.name, request, _operands(facts))
        key = bwd_key_for(cfg, dtype_names(operands), bool(wgmma), stages)
        return GdnSm90Plan(
            self.name,
            request.graph.name,
            kernels_ready(self.name, plan_label(plan, cfg), lambda: compiled_backward(key)),
            operands,
            backward_regions(cfg),
            _sizes(cfg),
            _BWD_POINTERS,
        )
