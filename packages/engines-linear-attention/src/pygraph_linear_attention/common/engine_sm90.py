"""What the CuTe DSL (Hopper) engines share, gdn's and kda's (`gdn.engine_sm90`, `kda.engine_sm90`):
the kernels' own build rules on top of an op's support rules (`build_reason`), the plan that binds a
compiled function to one graph (`Sm90Plan`), and the knob checks.

A plan holds a compiled TVM-FFI function of raw addresses, settled at build down to where each of its
pointer arguments comes from (an operand of the call or a workspace region); a call checks the
declared geometry and the 16-byte alignment the copies need, and passes the addresses, then the
graph's sizes and scale.
"""

from __future__ import annotations

from typing import Any

from pygraph.engines.base import BaseEngine, CompiledPlan, ExecutionContext, PlanConfig, knobs_key
from pygraph.errors import GraphNotSupportedError
from pygraph.execution.errors import OperandGeometryError
from pygraph.ir.dtypes import data_type
from pygraph_linear_attention.analyzer import LinearAttentionFacts
from pygraph_linear_attention.common.host import chunk_state_elements, regions_bytes
from pygraph_linear_attention.common.support import DTYPE_NAMES, row_major

__all__ = [
    "ALIGNED", "CUTE_INSTALL", "HEAD_DIMS_SM90", "Sm90Plan", "build_reason", "check_block_v", "chunk_states_reason",
    "dtype_names", "knob_values", "knobs_in_domains", "plan_label",
]  # fmt: skip

HEAD_DIMS_SM90 = (64, 128)  # K and V: the tiles' registers are sized for these
CUTE_INSTALL = "pip install 'pygraph-engines-linear-attention[cute]'"


def plan_label(plan: PlanConfig, cfg: Any) -> str:
    """A plan's configuration in a log line: its knobs and the head dims."""
    knobs = ",".join(f"{k}={v}" for k, v in knobs_key(plan.knobs))
    return f"K={cfg.key_dim} V={cfg.value_dim}" + (f" [{knobs}]" if knobs else "")


# the operands every op's kernels read or write by 16-byte copies (GDN-2 adds its gates)
ALIGNED = ("q", "k", "v", "o", "dO")


def chunk_states_reason(facts: LinearAttentionFacts) -> str | None:
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
        reason = chunk_states_reason(facts)
        if reason is not None:
            return reason
    for role, t in operands.items():
        if role in ("a_log", "dt_bias") and t.data_type is not data_type.FLOAT:
            return f"{role} must be FLOAT, got {t.data_type.name}"
        shape = tuple(int(d) for d in t.dim)
        stride = tuple(int(s) for s in (t.stride or row_major(shape)))
        if any(d > 1 for d in shape) and stride != row_major(shape):
            return f"operand {role} ({t.name}) must be row-major contiguous {list(row_major(shape))}, got stride {list(stride)}"
    return None


class Sm90Plan(CompiledPlan):
    """A compiled CuTe DSL linear-attention function (gdn_sm90's forward or backward, kda_sm90's)
    bound to one graph: operand positions, geometry and workspace settled at build, down to where each
    of the compiled function's pointers (``pointers``, in its argument order) comes from; ``sizes``:
    the arguments after the pointers (the 32-bit sizes, then the scale). ``engine`` names it in its
    refusals; ``aligned`` the roles its kernels read or write 16 bytes at a time."""

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
        pointers: tuple,
        aligned: tuple = ALIGNED,
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


def knob_values(plan: PlanConfig) -> dict[str, Any]:
    """The plan's knobs by name."""
    return {getattr(k, "name", k): v for k, v in (plan.knobs or {}).items()}


def knobs_in_domains(engine: BaseEngine, facts: LinearAttentionFacts, plan: PlanConfig) -> dict[str, Any]:
    """The plan's knobs by name, each checked against ``engine``'s domain (`Capabilities.mismatch`)."""
    problem = engine.capabilities.mismatch(facts, plan.knobs or {})
    if problem is not None:
        raise GraphNotSupportedError(f"{engine.name}: {problem}")
    return knob_values(plan)


def check_block_v(engine: str, facts: LinearAttentionFacts, block_v: int) -> None:
    """Decline (naming ``engine``) a BLOCK_V that does not tile the value head dim."""
    if facts.head_dim_v % block_v:
        raise GraphNotSupportedError(
            f"{engine}: BLOCK_V={block_v} does not divide the value head dim {facts.head_dim_v}"
        )


def dtype_names(operands: tuple[dict, dict]) -> dict[str, str]:
    """The dtype names by role of `declared_operands`' result (what the compile keys hold)."""
    return {role: DTYPE_NAMES[d.dtype] for role, d in operands[1].items()}
