"""``gdn_sm90``: the ``gdn`` family's Hopper engine (CuTe DSL), the forward.

Two kernels (``kernels/gdn_sm90_fwd.py``): the per-chunk WY prepare and the state scan with its
output. It serves what ``gdn_cutile`` serves, within the kernels' narrower build: K and V of 64 or
128, every operand row-major contiguous ([T, heads, dim]), a_log and dt_bias FLOAT; the backward
(gdn_bwd) stays with ``gdn_cutile_bwd``. `build_plan` compiles the configuration (CuTe DSL, once per
process and key: about 6 s on a CPU core) and binds the operand positions; a call checks the
declared geometry and the 16-byte alignment the copies need, and launches with raw addresses.
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
)
from pygraph.errors import GraphNotSupportedError
from pygraph.ir.dtypes import data_type
from pygraph_linear_attention.analyzer import LinearAttentionFacts
from pygraph_linear_attention.engines.cutile import (
    _NAMES,
    _heads,
    _operands,
    _support_reason,
    config_for,
    facts_of,
)
from pygraph_linear_attention.kernels.gdn_sm90_host import (
    BLOCK_V_SM90,
    HEAD_DIMS_SM90,
    SPLIT_OFFERED,
    SPLIT_SM90,
    STAGES_SM90,
    compiled_forward,
    key_for,
    search_steps,
    workspace_regions,
)

__all__ = ["GdnSm90Engine", "GdnSm90Plan"]

_FEATURES = frozenset(
    {"qk_l2norm", "beta_sigmoid", "neg_eigval", "safe_gate", "initial_state", "final_state", "gva", "gqa"}
)
_INSTALL = "pip install 'pygraph-engines-linear-attention[cute]'"
# the compiled function's pointer arguments, in order (`gdn_sm90_host`)
_POINTERS = (
    "q", "k", "v", "g", "beta", "a_log", "dt_bias", "cu_seqlens", "h0", "o", "ht", "gamma", "w", "u", "hs", "vnew",
)  # fmt: skip
_ALIGNED = ("q", "k", "v", "o")  # read or written by 16-byte copies


def _contiguous(shape: tuple) -> tuple:
    stride, acc = [], 1
    for d in reversed(shape):
        stride.append(acc)
        acc *= d
    return tuple(reversed(stride))


def _sm90_reason(facts: LinearAttentionFacts) -> str | None:
    """Why gdn_sm90 cannot serve a graph gdn_cutile serves (the rule and the value), or None."""
    if facts.backward:
        return "serves gdn (the forward); gdn_bwd graphs are served by gdn_cutile_bwd"
    if facts.head_dim_k not in HEAD_DIMS_SM90 or facts.head_dim_v not in HEAD_DIMS_SM90:
        return f"head dims K={facts.head_dim_k}, V={facts.head_dim_v}: each must be one of {HEAD_DIMS_SM90}"
    elements = facts.tokens * facts.heads_out * max(facts.head_dim_k, facts.head_dim_v)
    if elements >= 2**31:
        return (
            f"T x heads x head dim = {facts.tokens} x {facts.heads_out} x "
            f"{max(facts.head_dim_k, facts.head_dim_v)} = {elements}: the kernels index with 32-bit offsets (< 2^31)"
        )
    for role, t in _operands(facts).items():
        if role in ("a_log", "dt_bias") and t.data_type is not data_type.FLOAT:
            return f"{role} must be FLOAT, got {t.data_type.name}"
        shape = tuple(int(d) for d in t.dim)
        stride = tuple(int(s) for s in (t.stride or _contiguous(shape)))
        if any(d > 1 for d in shape) and stride != _contiguous(shape):
            return f"operand {role} ({t.name}) must be row-major contiguous {list(_contiguous(shape))}, got stride {list(stride)}"
    return None


class GdnSm90Plan(CompiledPlan):
    """The compiled forward bound to one graph: operand positions, geometry and workspace settled at build."""

    reads_stream = True

    def __init__(
        self, name: str, fn: Any, rows: tuple, regions: tuple, workspace_bytes: int, sizes: tuple
    ) -> None:
        self._name, self._fn, self._rows = name, fn, rows
        self._regions = {r.name: r.offset for r in regions}
        self._workspace_bytes, self._sizes = workspace_bytes, sizes

    def get_workspace_size(self) -> int:
        return self._workspace_bytes

    def execute(self, graph: Any, pack: Any, ctx: ExecutionContext) -> None:
        bufs = pack.buffers
        workspace = ctx.workspace or 0
        if not workspace:
            self._refuse(f"needs a workspace of {self._workspace_bytes} bytes, got none")
        if workspace % 256:
            self._refuse(f"workspace pointer {workspace:#x} is not 256-byte aligned")
        spare = workspace + self._regions["spare"]
        pointers = {name: workspace + offset for name, offset in self._regions.items()}
        for role, pos, shape, stride in self._rows:
            buf = bufs[pos]
            if buf.shape != shape or buf.stride != stride:
                self._refuse(
                    f"operand {role} is shape {list(buf.shape)} stride {list(buf.stride)}; the plan is "
                    f"compiled for the declared shape {list(shape)} stride {list(stride)}"
                )
            if role in _ALIGNED and buf.pointer % 16:
                self._refuse(
                    f"operand {role} at {buf.pointer:#x} is not 16-byte aligned (its rows are copied 16 bytes at a time)"
                )
            pointers[role] = buf.pointer
        self._fn(*(pointers.get(role, spare) for role in _POINTERS), *self._sizes, ctx.stream or 0)

    def _refuse(self, rule: str) -> None:
        raise ValueError(f"gdn_sm90 (graph {self._name!r}): {rule}")


class GdnSm90Engine(BaseEngine):
    name = "gdn_sm90"
    capabilities = Capabilities(
        sm_lo=90,
        sm_hi=90,
        dtypes={data_type.BFLOAT16, data_type.HALF},
        features=_FEATURES,
        knob_domains={"BLOCK_V": BLOCK_V_SM90, "STAGES": STAGES_SM90, "SPLIT": SPLIT_SM90},
    )

    def _facts(self, request: EngineRequest) -> LinearAttentionFacts:
        return facts_of(self.name, request)

    def check_support(self, request: EngineRequest) -> None:
        facts = self._facts(request)
        reason = (
            _support_reason(facts)
            or _sm90_reason(facts)
            or self.capabilities.mismatch(facts, device=request.device)
        )
        if reason is not None:
            raise GraphNotSupportedError(f"{self.name}: {reason}")
        if importlib.util.find_spec("cutlass") is None:
            raise ImportError(f"{self.name}: needs CuTe DSL ({_INSTALL})")

    def _knobs(self, facts: LinearAttentionFacts, plan: PlanConfig) -> tuple[int, int, int]:
        """(BLOCK_V, STAGES, SPLIT) of the plan, checked against their domains and the value head dim."""
        knobs = {getattr(k, "name", k): v for k, v in (plan.knobs or {}).items()}
        block_v, stages = knobs.get("BLOCK_V", BLOCK_V_SM90[0]), knobs.get("STAGES", STAGES_SM90[0])
        split = knobs.get("SPLIT", SPLIT_SM90[0])
        if split not in SPLIT_SM90:
            raise GraphNotSupportedError(f"{self.name}: knob SPLIT={split!r} outside its domain {SPLIT_SM90}")
        if split not in SPLIT_OFFERED:
            raise GraphNotSupportedError(
                f"{self.name}: knob SPLIT={split!r} is not served yet: its output read NaN at B4 T4096 H16 "
                f"on the H200 and its fix (a missing barrier) is not yet run there (kernels/gdn_sm90_host.py); "
                f"use SPLIT=0"
            )
        if block_v not in BLOCK_V_SM90:
            raise GraphNotSupportedError(
                f"{self.name}: knob BLOCK_V={block_v!r} outside its domain {BLOCK_V_SM90}"
            )
        if stages not in STAGES_SM90:
            raise GraphNotSupportedError(
                f"{self.name}: knob STAGES={stages!r} outside its domain {STAGES_SM90}"
            )
        if facts.head_dim_v % block_v:
            raise GraphNotSupportedError(
                f"{self.name}: BLOCK_V={block_v} does not divide the value head dim {facts.head_dim_v}"
            )
        return block_v, stages, split

    def get_workspace_size(self, request: EngineRequest, plan: PlanConfig) -> int:
        facts = self._facts(request)
        knobs = {getattr(k, "name", k): v for k, v in (plan.knobs or {}).items()}
        last = workspace_regions(config_for(facts, BLOCK_V_SM90[0]), bool(knobs.get("SPLIT", 0)))[-1]
        return last.offset + last.nbytes

    def build_plan(
        self, request: EngineRequest, plan: PlanConfig, ctx: ExecutionContext | None
    ) -> CompiledPlan:
        self.check_support(request)
        facts = self._facts(request)
        block_v, stages, split = self._knobs(facts, plan)
        cfg = config_for(facts, block_v)
        layout = request.layout
        positions = {role: layout.position(t) for role, t in _operands(facts).items()}
        declared = {role: layout.declared[p] for role, p in positions.items()}
        for role, d in declared.items():
            if d.dtype not in _NAMES:
                raise GraphNotSupportedError(
                    f"{self.name}: operand {role} has dtype {d.dtype.name}, not served"
                )
        names = {role: _NAMES[d.dtype] for role, d in declared.items()}
        key = key_for(
            cfg, beta=names["beta"], h0=names.get("h0", "float32"), ht=names.get("ht", "float32"),
            cu=names["cu_seqlens"], stages=stages, split=bool(split),
        )  # fmt: skip
        fn = compiled_forward(key)
        node = facts.node
        a_log, dt_bias = node.inputs.get("a_log"), node.inputs.get("dt_bias")
        sizes = (
            cfg.tokens, cfg.sequences, search_steps(cfg.sequences), cfg.heads_qk, cfg.heads_v, cfg.heads_out,
            _heads(node.inputs["g"]), _heads(node.inputs["beta"]),
            cfg.heads_a_log if a_log is not None else 1, cfg.heads_dt_bias if dt_bias is not None else 1,
        )  # fmt: skip
        rows = tuple(
            (role, pos, tuple(declared[role].shape), tuple(declared[role].stride))
            for role, pos in positions.items()
        )
        regions = workspace_regions(cfg, bool(split))
        last = regions[-1]
        return GdnSm90Plan(request.graph.name, fn, rows, regions, last.offset + last.nbytes, sizes)
